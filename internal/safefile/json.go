package safefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
)

// WriteJSON writes v to path as indented JSON (see MarshalJSON and Write).
func WriteJSON(path string, v any) error {
	b, err := MarshalJSON(v)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return WriteFile(path, append(b, '\n'))
}

// MarshalJSON is json.MarshalIndent with two spaces, except that a NaN or
// an infinity, which JSON cannot hold, is written as null instead of failing
// the whole document: a summary with one bad number is still a summary.
func MarshalJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	var uv *json.UnsupportedValueError
	if err == nil || !errors.As(err, &uv) {
		return b, err
	}
	return json.MarshalIndent(finite(reflect.ValueOf(v)), "", "  ")
}

// finite rebuilds v as maps, slices and ordered objects, with every
// non-finite float replaced by nil. Struct fields keep their order and
// their json tags (name, omitempty, "-"); values with their own MarshalJSON
// are marshalled by it.
func finite(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	if v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		if m, ok := v.Interface().(json.Marshaler); ok && v.Kind() == reflect.Pointer {
			return marshaled(m)
		}
		return finite(v.Elem())
	}
	if v.CanInterface() {
		if m, ok := v.Interface().(json.Marshaler); ok {
			return marshaled(m)
		}
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return v.Interface()
	case reflect.Struct:
		o := &object{}
		addFields(o, v)
		return o
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			out[fmt.Sprint(it.Key().Interface())] = finite(it.Value())
		}
		return out
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Interface() // base64, as encoding/json writes bytes
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = finite(v.Index(i))
		}
		return out
	}
	if v.CanInterface() {
		return v.Interface()
	}
	return nil
}

func marshaled(m json.Marshaler) any {
	b, err := m.MarshalJSON()
	if err != nil || !json.Valid(b) {
		return nil
	}
	return json.RawMessage(b)
}

func addFields(o *object, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			fv := v.Field(i)
			if fv.Kind() == reflect.Pointer {
				if fv.IsNil() {
					continue
				}
				fv = fv.Elem()
			}
			if fv.Kind() == reflect.Struct {
				addFields(o, fv)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fv := v.Field(i)
		if strings.Contains(","+opts+",", ",omitempty,") && isEmpty(fv) {
			continue
		}
		o.keys = append(o.keys, name)
		o.vals = append(o.vals, finite(fv))
	}
}

// isEmpty is encoding/json's test for omitempty.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// object is a JSON object whose keys keep their order.
type object struct {
	keys []string
	vals []any
}

func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
