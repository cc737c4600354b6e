// Package typednil finds the nil values that compare unequal to nil: an interface holding a nil
// pointer, func, map, chan or interface (a (*natsjs.Publisher)(nil) given as an outbox.Publisher,
// say). Such a value passes a check for nil and fails later, when a method is called on it. The
// constructors refuse them with a *txinbox.ConfigError naming the field.
package typednil

import (
	"fmt"
	"reflect"
)

// Is reports whether v is nil or holds a nil pointer, func, map, chan or interface.
func Is(v any) bool {
	if v == nil {
		return true
	}
	return isNil(reflect.ValueOf(v))
}

// isNil reports whether v is of a kind that can be nil and is nil.
func isNil(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Field returns the name of the first exported field of the struct s whose type is an interface
// and whose value is not nil but holds a nil pointer, func, map, chan or interface, and the reason
// to give for it ("holds a nil *natsjs.Publisher: ..."); "" if there is none, or s is not a struct.
// A nil interface field (the default) is not reported, nor a field of a concrete type.
func Field(s any) (name, reason string) {
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Struct {
		return "", ""
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Type.Kind() != reflect.Interface {
			continue
		}
		fv := v.Field(i)
		if fv.IsNil() {
			continue
		}
		if held := fv.Elem(); isNil(held) {
			return f.Name, Reason(held.Type())
		}
	}
	return "", ""
}

// Reason is the reason given for a field that holds a nil value of type t.
func Reason(t reflect.Type) string {
	return fmt.Sprintf("holds a nil %v: an interface holding a nil value is not nil, and its methods would run on nil; give it a value, or leave it unset", t)
}
