package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decoder reads YAML documents against the shape of Config: every key must exist, appear
// once, and hold a value of its kind. Problems name the source, the line and the key.
type decoder struct {
	source string // "config file hotkeyd.yaml" or "environment HOTKEYD_HOT_OVERRIDES"
	errs   []error
}

func (d *decoder) fail(n *yaml.Node, format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf("%s:%d: %s", d.source, n.Line, fmt.Sprintf(format, args...)))
}

// parseFile reads a config file and returns the keys it sets, each with a value of the
// type of its Config field, and the line of each key. Syntax errors name the file and the
// line; unknown keys, duplicate keys and values of the wrong kind are all reported, joined.
func parseFile(name string, data []byte) (values map[string]any, lines map[string]int, err error) {
	source := "config file " + name
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]any{}, map[string]int{}, nil
		}
		return nil, nil, fmt.Errorf("%s: %w", source, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", source, err)
		}
		return nil, nil, fmt.Errorf("%s:%d: a second YAML document starts here; put all settings in one document", source, extra.Line)
	}
	d := &decoder{source: source}
	var cfg Config
	set := map[string]int{}
	if len(doc.Content) > 0 {
		root := resolve(doc.Content[0])
		switch {
		case isNull(root):
		case root.Kind != yaml.MappingNode:
			d.fail(root, "the file must be a mapping of keys like \"http:\", got %s", describe(root))
		default:
			d.section(root, reflect.ValueOf(&cfg).Elem(), "", set)
		}
	}
	if len(d.errs) > 0 {
		return nil, nil, errors.Join(d.errs...)
	}
	out := make(map[string]any, len(set))
	cv := reflect.ValueOf(cfg)
	for _, f := range fields() {
		if _, ok := set[f.key]; ok {
			out[f.key] = cv.FieldByIndex(f.index).Interface()
		}
	}
	return out, set, nil
}

// parseList reads the YAML text of a variable holding a list of structs, in flow style:
// HOTKEYD_HOT_OVERRIDES='[{pattern: "score:*", read_rate: 5000}]' for hot.overrides (kind
// kOverrides), HOTKEYD_REGISTRY_EVENTS for registry.events (kEvents). Empty text is an
// empty list.
func parseList(source, key string, k kind, text string) (any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if len(doc.Content) == 0 {
		return zeroOf(k), nil
	}
	d := &decoder{source: source}
	v := reflect.New(reflect.TypeOf(zeroOf(k))).Elem()
	d.leaf(resolve(doc.Content[0]), k, v, key)
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return v.Interface(), nil
}

// resolve follows aliases to the node they stand for.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names the kind of a node for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "an alias"
}

// section decodes a mapping into the struct dst. prefix is the dotted path of dst with a
// trailing dot ("" at the top); set collects the keys of the leaves written, each with
// its line.
func (d *decoder) section(n *yaml.Node, dst reflect.Value, prefix string, set map[string]int) {
	t := dst.Type()
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = yamlName(t.Field(i))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := resolve(n.Content[i]), resolve(n.Content[i+1])
		if kn.Kind != yaml.ScalarNode {
			d.fail(kn, "a key in %s must be a name, got %s", sectionName(prefix), describe(kn))
			continue
		}
		name := kn.Value
		key := prefix + name
		if kn.ShortTag() == "!!merge" {
			d.fail(kn, "merge keys (<<) are not supported in %s; write the keys out", sectionName(prefix))
			continue
		}
		fi := -1
		for j, nm := range names {
			if nm == name {
				fi = j
				break
			}
		}
		if fi < 0 {
			msg := fmt.Sprintf("unknown key %q", key)
			if c := closest(name, names); c != "" {
				msg += fmt.Sprintf("; did you mean %q?", prefix+c)
			}
			d.fail(kn, "%s (keys allowed in %s: %s)", msg, sectionName(prefix), strings.Join(names, ", "))
			continue
		}
		if line, dup := seen[name]; dup {
			d.fail(kn, "key %q is set twice (first on line %d); set it once", key, line)
			continue
		}
		seen[name] = kn.Line
		fv := dst.Field(fi)
		k := kindOf(fv.Type())
		if k == kStrings && t == eventType {
			// Patterns are keys: not split at commas, trimmed or dropped when empty.
			k = kList
		}
		if k == 0 {
			switch {
			case isNull(vn):
			case vn.Kind != yaml.MappingNode:
				d.fail(vn, "%s must be a mapping of keys (%s), got %s", key, strings.Join(fieldNames(fv.Type()), ", "), describe(vn))
			default:
				d.section(vn, fv, key+".", set)
			}
			continue
		}
		if d.leaf(vn, k, fv, key) && set != nil {
			set[key] = kn.Line
		}
	}
}

// sectionName names a section for messages: "the top level" or "hot.read".
func sectionName(prefix string) string {
	if prefix == "" {
		return "the top level"
	}
	return strings.TrimSuffix(prefix, ".")
}

func fieldNames(t reflect.Type) []string {
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = yamlName(t.Field(i))
	}
	return names
}

// stringItems decodes the sequence n of strings into dst, reporting each item that is
// not one as key[i], which must be want; with trim it drops the space around items and
// the items left empty.
func (d *decoder) stringItems(n *yaml.Node, dst reflect.Value, key, want string, trim bool) bool {
	list := make([]string, 0, len(n.Content))
	ok := true
	for i, item := range n.Content {
		item = resolve(item)
		if item.Kind != yaml.ScalarNode || isNull(item) {
			d.fail(item, "%s[%d] must be %s, got %s", key, i, want, describe(item))
			ok = false
			continue
		}
		v := item.Value
		if trim {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
		}
		list = append(list, v)
	}
	if ok {
		dst.Set(reflect.ValueOf(list))
	}
	return ok
}

// leaf decodes the value of one key of kind k into dst and reports whether it succeeded.
func (d *decoder) leaf(n *yaml.Node, k kind, dst reflect.Value, key string) bool {
	if isNull(n) {
		dst.Set(reflect.ValueOf(zeroOf(k)))
		return true
	}
	switch k {
	case kStrings:
		switch n.Kind {
		case yaml.ScalarNode:
			dst.Set(reflect.ValueOf(splitList(n.Value)))
			return true
		case yaml.SequenceNode:
			return d.stringItems(n, dst, key, `a string like "127.0.0.1:6379"`, true)
		}
		d.fail(n, "%s must be a list of strings, got %s", key, describe(n))
		return false
	case kList:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, "%s must be a list of strings like [\"score:match42\"], got %s", key, describe(n))
			return false
		}
		return d.stringItems(n, dst, key, "a string", false)
	case kOverrides, kEvents:
		like := `{pattern: "score:*", read_rate: 5000}`
		what := "overrides"
		if k == kEvents {
			like = `{id: final, patterns: ["score:match42"], start: "2026-12-01T19:30:00+01:00", end: "2026-12-01T21:30:00+01:00"}`
			what = "events"
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(n, "%s must be a list of %s like %s, got %s", key, what, like, describe(n))
			return false
		}
		list := reflect.MakeSlice(dst.Type(), len(n.Content), len(n.Content))
		before := len(d.errs)
		for i, item := range n.Content {
			item = resolve(item)
			ik := fmt.Sprintf("%s[%d]", key, i)
			if item.Kind != yaml.MappingNode {
				d.fail(item, "%s must be a mapping like %s, got %s", ik, like, describe(item))
				continue
			}
			d.section(item, list.Index(i), ik+".", nil)
		}
		if len(d.errs) > before {
			return false
		}
		dst.Set(list)
		return true
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n, "%s must be a single value, got %s", key, describe(n))
		return false
	}
	v, err := parseText(k, n.Value)
	if err != nil {
		d.fail(n, "%s: %v", key, err)
		return false
	}
	dst.Set(reflect.ValueOf(v))
	return true
}

// YAML returns the configuration as a YAML document with every key, in the layout of the
// file, such that loading it gives c back. A set auth.token or proxy.upstream_password
// (secretKeys) is written as "***", so the output is safe to print and share; Load
// refuses "***" as a secret, so the output loads back only once the secrets are set.
func (c Config) YAML() ([]byte, error) {
	root := encodeStruct(reflect.ValueOf(c), "")
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("config: encode YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: encode YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// encodeStruct encodes a section, an override or an event as a mapping node. Zero fields
// of an override are left out (they inherit), and so are the zero optional fields of an
// event.
func encodeStruct(v reflect.Value, prefix string) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	t := v.Type()
	for i := range t.NumField() {
		name := yamlName(t.Field(i))
		key := prefix + name
		fv := v.Field(i)
		if fv.IsZero() && optional(t, name) {
			continue
		}
		var vn *yaml.Node
		switch kindOf(fv.Type()) {
		case 0:
			vn = encodeStruct(fv, key+".")
		case kOverrides, kEvents:
			vn = &yaml.Node{Kind: yaml.SequenceNode}
			for j := range fv.Len() {
				vn.Content = append(vn.Content, encodeStruct(fv.Index(j), key+"[]."))
			}
			if fv.Len() == 0 {
				vn.Style = yaml.FlowStyle
			}
		case kDuration:
			vn = scalar(fv.Interface().(interface{ String() string }).String())
		case kStrings:
			vn = scalar(fv.Interface())
			vn.Style = yaml.FlowStyle
		default:
			x := fv.Interface()
			if secretKeys[key] && x != "" {
				x = redacted
			}
			vn = scalar(x)
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, vn)
	}
	return m
}

// optional reports whether the field name of the list item type t may be left out of
// YAML when zero: every field but the required ones. Fields of sections are never left
// out, so that --print-config shows every key.
func optional(t reflect.Type, name string) bool {
	switch t {
	case overrideType:
		return name != "pattern"
	case eventType:
		return name != "id" && name != "patterns" && name != "start" && name != "end"
	}
	return false
}

// scalar encodes a plain Go value as a node; yaml quotes strings that would read as
// something else.
func scalar(x any) *yaml.Node {
	var n yaml.Node
	if err := n.Encode(x); err != nil {
		// Encoding strings, numbers, booleans and string slices cannot fail.
		panic(fmt.Sprintf("config: encode %v: %v", x, err))
	}
	return &n
}
