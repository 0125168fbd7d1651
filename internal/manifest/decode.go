package manifest

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The strict decode walks the generic JSON value against the Go type the way
// encoding/json would fill it, so that an unknown or mistyped field is
// reported with its full path (spec.containers[0].imagePullPolic) rather than
// encoding/json's type-only message, and so that case-insensitive key
// matching (which encoding/json does and the API server does not) is refused.

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func reflectTypeOf(ptr any) reflect.Type { return reflect.TypeOf(ptr).Elem() }

// unknownFieldError reads like the API server's strict-decoding complaint,
// but with the path first so it lines up with validation errors.
type unknownFieldError struct{ path string }

func (e unknownFieldError) Error() string { return e.path + ": unknown field" }

// checkFields reports every key in v that the type t would not accept, and
// every value of the wrong JSON type. With redact, messages leave values out
// (Secrets: a plain-text password in data is the usual mistake).
func checkFields(v any, t reflect.Type, redact bool) []error {
	c := checker{redact: redact}
	c.walk(v, t, nil)
	return c.errs
}

type checker struct {
	redact bool
	errs   []error
}

func (c *checker) walk(v any, t reflect.Type, p *field.Path) {
	if v == nil {
		return // null leaves the field at its zero value, as encoding/json does
	}
	// Types with their own JSON form (resource.Quantity, intstr.IntOrString,
	// metav1.Time, ...) are checked by decoding just this value.
	if t.Kind() != reflect.Pointer && (reflect.PointerTo(t).Implements(jsonUnmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		if out := c.trialDecode(v, t, p); out != nil && t == timeType {
			// Written back as RFC 3339 in UTC, which has four-digit years.
			if y := out.(*metav1.Time).UTC().Year(); y < 0 || y > 9999 {
				c.invalid(p, v, "must be between years 0000 and 9999 in UTC")
			}
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		c.walk(v, t.Elem(), p)
	case reflect.Interface:
		// Anything goes; nothing in the v1 types we decode uses it.
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			c.typeError(p, v, "an object")
			return
		}
		fields := structFields(t)
		for _, k := range sortedKeys(obj) {
			f, ok := fields[k]
			if !ok {
				c.errs = append(c.errs, unknownFieldError{child(p, k).String()})
				continue
			}
			c.walk(obj[k], f.typ, child(p, k))
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			c.typeError(p, v, "an object")
			return
		}
		for _, k := range sortedKeys(obj) {
			c.yamlSafe(p.Key(k), k)
			c.walk(obj[k], t.Elem(), p.Key(k))
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			c.trialDecode(v, t, p) // []byte is a base64 string
			return
		}
		list, ok := v.([]any)
		if !ok {
			c.typeError(p, v, "a list")
			return
		}
		for i, e := range list {
			c.walk(e, t.Elem(), p.Index(i))
		}
	case reflect.String:
		if str, ok := v.(string); !ok {
			c.typeError(p, v, "a string (quote it)")
		} else {
			c.yamlSafe(p, str)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			c.typeError(p, v, "a boolean (true or false)")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			c.typeError(p, v, "an integer")
			return
		}
		if i, err := n.Int64(); err != nil || reflect.Zero(t).OverflowInt(i) {
			c.invalid(p, v, fmt.Sprintf("must be a whole number that fits in %d bits", t.Bits()))
		}
	default: // unsigned and float kinds: none in v1 Pods today
		c.trialDecode(v, t, p)
	}
}

// yamlSafe rejects characters that an escape can put in a string but that
// YAML cannot carry unescaped, which is how sigs.k8s.io/yaml writes them
// (through encoding/json): such a Pod could not be written back as YAML
// (DEL, C1 controls, U+FFFE/U+FFFF), or would come back changed (NEL, U+0085,
// is a YAML 1.1 line break).
func (c *checker) yamlSafe(p *field.Path, s string) {
	i := strings.IndexFunc(s, func(r rune) bool {
		return (r >= 0x7f && r <= 0x9f) || r == 0xfffe || r == 0xffff
	})
	if i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		c.invalid(p, s, fmt.Sprintf("must not contain %U: YAML cannot carry it", r))
	}
}

// trialDecode decodes one value into a fresh *t, reporting an error by
// path; it returns the *t, or nil on error.
func (c *checker) trialDecode(v any, t reflect.Type, p *field.Path) any {
	out := reflect.New(t).Interface()
	b, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(b, out)
	}
	if err != nil {
		c.invalid(p, v, strings.TrimPrefix(err.Error(), "json: "))
		return nil
	}
	return out
}

func (c *checker) typeError(p *field.Path, v any, want string) {
	c.invalid(p, shortValue(v), fmt.Sprintf("must be %s, not %s", want, jsonKind(v)))
}

func (c *checker) invalid(p *field.Path, v any, detail string) {
	if c.redact {
		v = field.OmitValueType{}
	}
	c.errs = append(c.errs, field.Invalid(p, v, detail))
}

// shortValue keeps messages readable when a whole object sits where a
// scalar belongs.
func shortValue(v any) any {
	switch v.(type) {
	case map[string]any:
		return "{...}"
	case []any:
		return "[...]"
	}
	return v
}

func child(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

type structField struct {
	typ reflect.Type
}

var fieldCache sync.Map // reflect.Type -> map[string]structField

// structFields maps the JSON names t accepts to their types, flattening
// embedded structs without a name (TypeMeta's `json:",inline"`) the way
// encoding/json does.
func structFields(t reflect.Type) map[string]structField {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]structField)
	}
	fields := map[string]structField{}
	addStructFields(t, fields)
	fieldCache.Store(t, fields)
	return fields
}

func addStructFields(t reflect.Type, fields map[string]structField) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fields[name] = structField{typ: sf.Type}
	}
	// Outer fields win over promoted ones, as in encoding/json.
	for _, et := range embedded {
		inner := map[string]structField{}
		addStructFields(et, inner)
		for name, f := range inner {
			if _, dup := fields[name]; !dup {
				fields[name] = f
			}
		}
	}
}

var timeType = reflect.TypeFor[metav1.Time]()

// normalize puts a decoded object in the form it has after a write to the
// API server and a read back, so that podlab's output is stable across a
// round trip: empty lists and maps in omitempty fields become nil (JSON
// drops them), and timestamps keep whole seconds (their JSON form has no
// fraction).
func normalize(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normalize(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			normalize(v.Index(i))
		}
	case reflect.Struct:
		if v.Type() == timeType {
			t := v.Addr().Interface().(*metav1.Time)
			t.Time = t.Truncate(time.Second)
			return
		}
		for i := range v.NumField() {
			f, sf := v.Field(i), v.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			if (f.Kind() == reflect.Slice || f.Kind() == reflect.Map) && !f.IsNil() && f.Len() == 0 &&
				strings.Contains(sf.Tag.Get("json"), ",omitempty") {
				f.SetZero()
				continue
			}
			normalize(f)
		}
	}
}
