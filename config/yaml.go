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
// type of its Config field. Syntax errors name the file and the line; unknown keys,
// duplicate keys and values of the wrong kind are all reported, joined.
func parseFile(name string, data []byte) (map[string]any, error) {
	source := "config file " + name
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]any{}, nil
		}
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		return nil, fmt.Errorf("%s:%d: a second YAML document starts here; put all settings in one document", source, extra.Line)
	}
	d := &decoder{source: source}
	var cfg Config
	set := map[string]bool{}
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
		return nil, errors.Join(d.errs...)
	}
	out := make(map[string]any, len(set))
	cv := reflect.ValueOf(cfg)
	for _, f := range fields() {
		if set[f.key] {
			out[f.key] = cv.FieldByIndex(f.index).Interface()
		}
	}
	return out, nil
}

// parseOverrides reads the YAML text of HOTKEYD_HOT_OVERRIDES, a list of overrides in flow
// style: [{pattern: "score:*", read_rate: 5000}].
func parseOverrides(source, text string) ([]Override, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	d := &decoder{source: source}
	var out []Override
	if len(doc.Content) == 0 {
		return []Override{}, nil
	}
	v := reflect.ValueOf(&out).Elem()
	d.leaf(resolve(doc.Content[0]), kOverrides, v, "hot.overrides")
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return out, nil
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
// trailing dot ("" at the top); set collects the keys of the leaves written.
func (d *decoder) section(n *yaml.Node, dst reflect.Value, prefix string, set map[string]bool) {
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
			set[key] = true
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
			list := make([]string, 0, len(n.Content))
			ok := true
			for i, item := range n.Content {
				item = resolve(item)
				if item.Kind != yaml.ScalarNode || isNull(item) {
					d.fail(item, "%s[%d] must be a string like \"127.0.0.1:6379\", got %s", key, i, describe(item))
					ok = false
					continue
				}
				if s := strings.TrimSpace(item.Value); s != "" {
					list = append(list, s)
				}
			}
			if ok {
				dst.Set(reflect.ValueOf(list))
			}
			return ok
		}
		d.fail(n, "%s must be a list of strings, got %s", key, describe(n))
		return false
	case kOverrides:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, "%s must be a list of overrides like {pattern: \"score:*\", read_rate: 5000}, got %s", key, describe(n))
			return false
		}
		list := make([]Override, len(n.Content))
		before := len(d.errs)
		for i, item := range n.Content {
			item = resolve(item)
			ik := fmt.Sprintf("%s[%d]", key, i)
			if item.Kind != yaml.MappingNode {
				d.fail(item, "%s must be a mapping like {pattern: \"score:*\", read_rate: 5000}, got %s", ik, describe(item))
				continue
			}
			d.section(item, reflect.ValueOf(&list[i]).Elem(), ik+".", nil)
		}
		if len(d.errs) > before {
			return false
		}
		dst.Set(reflect.ValueOf(list))
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
// file, such that loading it gives c back. A set auth.token is written as "***", so the
// output is safe to print and share (but then does not load back to the same token).
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

// encodeStruct encodes a section (or an override) as a mapping node. Zero fields of an
// override are left out: they inherit.
func encodeStruct(v reflect.Value, prefix string) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	t := v.Type()
	for i := range t.NumField() {
		name := yamlName(t.Field(i))
		key := prefix + name
		fv := v.Field(i)
		if t == overrideType && name != "pattern" && fv.IsZero() {
			continue
		}
		var vn *yaml.Node
		switch kindOf(fv.Type()) {
		case 0:
			vn = encodeStruct(fv, key+".")
		case kOverrides:
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
			if key == "auth.token" && x != "" {
				x = redacted
			}
			vn = scalar(x)
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, vn)
	}
	return m
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
