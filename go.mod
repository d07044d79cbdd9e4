module github.com/ratebatch/ratebatch

go 1.26.0
