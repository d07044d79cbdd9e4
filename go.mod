module github.com/ratebatch/ratebatch

go 1.26.0

require (
	github.com/prometheus/client_golang v1.25.0 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
)
