module smolder/genprof

go 1.19
