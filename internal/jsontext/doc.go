// Package jsontext checks JSON text for what encoding/json would change silently.
//
// encoding/json decodes a \u escape that is half of a UTF-16 surrogate pair, with no
// other half, as U+FFFD, as it does each byte that is not UTF-8. A key named that way
// would become another key: different keys would be counted as one, or a mitigation
// would apply to the wrong key. Parsers of keys from outside (sample reports, plan
// overrides, registry events) refuse such text with the offset LoneSurrogate gives.
package jsontext
