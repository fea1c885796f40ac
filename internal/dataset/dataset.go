package dataset

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/ulikunitz/xz"
)

// Trace is a named sequence of keys.
type Trace struct {
	Name string
	Keys []string
}

// Names lists the traces with real skew, and Negative the trace with none (no key is seen
// more than twice), which a detector must not flag.
var (
	Names    = []string{"domains.txt", "war_and_peace.txt", "cache2k_web07.trace.xz", "cache2k_web12.trace.xz"}
	Negative = "corda_trace_vaultservice.gz"
)

// Dir returns the data folder: ../shared/data beside the directory holding go.mod.
func Dir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			data := filepath.Join(d, "..", "shared", "data")
			if _, err := os.Stat(data); err != nil {
				return "", fmt.Errorf("dataset: %s: %w (the traces live in ../shared/data beside the project)", data, err)
			}
			return data, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("dataset: no go.mod above " + wd)
		}
	}
}

// Load reads the trace with the given file name from Dir.
func Load(name string) (Trace, error) {
	dir, err := Dir()
	if err != nil {
		return Trace{}, err
	}
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return Trace{}, err
	}
	defer f.Close()
	var keys []string
	switch filepath.Ext(name) {
	case ".txt":
		if name == "domains.txt" {
			keys, err = lines(f)
		} else {
			keys, err = words(f)
		}
	case ".xz":
		var r io.Reader
		if r, err = xz.NewReader(bufio.NewReader(f)); err == nil {
			keys, err = ints(r, 4)
		}
	case ".gz":
		var r io.Reader
		if r, err = gzip.NewReader(f); err == nil {
			keys, err = ints(r, 8)
		}
	default:
		err = fmt.Errorf("unknown format %q", filepath.Ext(name))
	}
	if err != nil {
		return Trace{}, fmt.Errorf("dataset: %s: %w", name, err)
	}
	return Trace{Name: name, Keys: keys}, nil
}

// lines returns each line as a key (domains.txt: one domain a line, some lines empty).
func lines(r io.Reader) ([]string, error) { return scan(r, bufio.ScanLines) }

// words splits text on white space, skipping a leading UTF-8 byte-order mark.
func words(r io.Reader) ([]string, error) {
	keys, err := scan(r, bufio.ScanWords)
	if len(keys) > 0 && keys[0] == "\ufeff" {
		keys = keys[1:]
	}
	return keys, err
}

func scan(r io.Reader, split bufio.SplitFunc) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sc.Split(split)
	var keys []string
	for sc.Scan() {
		keys = append(keys, sc.Text())
	}
	return keys, sc.Err()
}

// ints reads big-endian integers of size bytes and spells them in decimal.
func ints(r io.Reader, size int) ([]string, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(b)%size != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of %d-byte keys", len(b), size)
	}
	keys := make([]string, 0, len(b)/size)
	for p := bytes.NewReader(b); p.Len() > 0; {
		var v int64
		if size == 4 {
			var x int32
			_ = binary.Read(p, binary.BigEndian, &x)
			v = int64(x)
		} else {
			_ = binary.Read(p, binary.BigEndian, &v)
		}
		keys = append(keys, strconv.FormatInt(v, 10))
	}
	return keys, nil
}

// Count is a key and its exact number of occurrences.
type Count struct {
	Key   string
	Count int
}

// Exact returns every distinct key of keys with its exact count, heaviest first (ties by key).
func Exact(keys []string) []Count {
	m := make(map[string]int)
	for _, k := range keys {
		m[k]++
	}
	out := make([]Count, 0, len(m))
	for k, c := range m {
		out = append(out, Count{k, c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Score compares reported keys (heaviest first) with exact counts (heaviest first) at
// rank k, fair to ties: recall is the share of the keys that are in the top k beyond
// doubt (count above the (k+1)-th) that the first k reported keys include; precision is
// the share of the first k reported keys whose count reaches the k-th.
func Score(exact []Count, reported []string, k int) (recall, precision float64) {
	if k > len(exact) {
		k = len(exact)
	}
	if k == 0 {
		return 1, 1
	}
	kth, next := exact[k-1].Count, 0
	if len(exact) > k {
		next = exact[k].Count
	}
	count := make(map[string]int, k)
	for _, c := range exact {
		if c.Count < kth {
			break
		}
		count[c.Key] = c.Count
	}
	reported = reported[:min(k, len(reported))]
	in := make(map[string]bool, len(reported))
	correct := 0
	for _, r := range reported {
		in[r] = true
		if count[r] >= kth {
			correct++
		}
	}
	sure, found := 0, 0
	for _, c := range exact[:k] {
		if c.Count > next {
			sure++
			if in[c.Key] {
				found++
			}
		}
	}
	recall, precision = 1, 1
	if sure > 0 {
		recall = float64(found) / float64(sure)
	}
	if len(reported) > 0 {
		precision = float64(correct) / float64(len(reported))
	}
	return recall, precision
}
