module toolgate.dev/crossclient

go 1.22

require toolgate.dev/client v0.0.0

replace toolgate.dev/client => ../../../clients/go
