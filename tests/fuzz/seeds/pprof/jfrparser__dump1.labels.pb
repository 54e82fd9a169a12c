











pool-2-thread-7thread_namepool-2-thread-1pool-2-thread-5pool-2-thread-3