// Package resp encodes what the bench commands send Redis and the replies they expect:
// commands as RESP arrays of bulk strings, and bulk strings.
package resp
