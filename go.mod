module github.com/hotkeyd/hotkeyd

go 1.26.0

require (
	github.com/axiomhq/hyperloglog v0.3.0
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/ulikunitz/xz v0.5.17
)

require (
	github.com/dgryski/go-metro v0.0.0-20250106013310-edb8663e5e33 // indirect
	github.com/kamstrup/intmap v0.5.2 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
