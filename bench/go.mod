module github.com/hotkeyd/hotkeyd/bench

go 1.26.0

require github.com/hotkeyd/hotkeyd v0.0.0

replace github.com/hotkeyd/hotkeyd => ../
