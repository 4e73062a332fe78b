module github.com/mgmtctl/mgmtctl

go 1.26.8

require (
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/crypto v0.59.0
)

require golang.org/x/sys v0.50.0 // indirect
