package mitigate

// SlotCount is the number of hash slots in a Redis Cluster: every key lives in one of
// slots 0 … SlotCount-1.
const SlotCount = 16384

// crcTable is the byte-at-a-time table of CRC-16/XMODEM (CCITT polynomial 0x1021, initial
// value 0, no reflection, no final XOR), the checksum Redis Cluster hashes keys with
// (src/crc16.c in the Redis sources). It is computed once and only ever read.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// Slot returns the Redis Cluster hash slot of key, exactly as CLUSTER KEYSLOT computes it:
// CRC-16/XMODEM of the key modulo 16384, where a key that holds a hash tag — a '{', then
// at least one byte, then the first '}' after that '{' — is hashed on the bytes between
// the braces only. Only the first '{' counts: "foo{{bar}}zap" hashes "{bar", and
// "foo{}{bar}" (an empty first tag) hashes the whole key. It does not allocate.
func Slot(key string) int { return slotOf(key) }

// SlotBytes is Slot for a key held in a byte slice. It does not allocate.
func SlotBytes(key []byte) int { return slotOf(key) }

// PrefixSlot returns the slot of every key that starts with prefix, and whether the prefix
// decides it: only when it holds a whole hash tag (a '{', at least one byte, then the first
// '}' after it), since a tag that closes later, or none at all, hashes bytes past the
// prefix. It serves keys that were cut short (a truncated key's shown prefix).
func PrefixSlot(prefix string) (int, bool) {
	if _, ok := hashTag(prefix); !ok {
		return 0, false
	}
	return slotOf(prefix), true
}

// hashTag returns the bytes a key's slot is computed from and whether they are a hash tag;
// without one, the whole key.
func hashTag[K string | []byte](key K) (K, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					return key[i+1 : j], true
				}
				return key, false
			}
		}
		return key, false
	}
	return key, false
}

// slotOf is Slot for either form of key.
func slotOf[K string | []byte](key K) int {
	key, _ = hashTag(key)
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[i]]
	}
	return int(crc & (SlotCount - 1))
}
