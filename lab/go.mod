module github.com/mgmtctl/mgmtctl/lab

go 1.26.8
