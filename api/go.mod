module github.com/cove-dev/cove/api

go 1.24
