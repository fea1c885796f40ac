module github.com/hotkeyd/hotkeyd/bench

go 1.26.0

require github.com/hotkeyd/hotkeyd v0.0.0

require golang.org/x/sys v0.48.0 // indirect

replace github.com/hotkeyd/hotkeyd => ../
