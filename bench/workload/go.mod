module smolder/bench/workload

go 1.19
