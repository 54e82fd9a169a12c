module smolder/pprofapp

go 1.19
