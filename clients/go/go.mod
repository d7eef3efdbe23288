module toolgate.dev/client

go 1.22
