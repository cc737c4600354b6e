package typednil

import (
	"io"
	"strings"
	"testing"
)

type closer struct{}

func (*closer) Close() error { return nil }

type closeFunc func() error

func (f closeFunc) Close() error { return f() }

type closeMap map[string]int

func (closeMap) Close() error { return nil }

type closeChan chan int

func (closeChan) Close() error { return nil }

func TestIs(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want bool
	}{
		{"nil", nil, true},
		{"nil pointer", (*closer)(nil), true},
		{"nil func", closeFunc(nil), true},
		{"nil map", closeMap(nil), true},
		{"nil chan", closeChan(nil), true},
		{"pointer", &closer{}, false},
		{"func", closeFunc(func() error { return nil }), false},
		{"map", closeMap{}, false},
		{"struct", struct{}{}, false},
		{"int", 0, false},
	} {
		if got := Is(tc.v); got != tc.want {
			t.Errorf("Is(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestField(t *testing.T) {
	type cfg struct {
		Name    string
		Ptr     *closer // a concrete pointer: nil is its zero value, not reported
		First   io.Closer
		Second  io.Closer
		private io.Closer
	}
	if name, _ := Field(cfg{}); name != "" {
		t.Errorf("zero config: field %q reported", name)
	}
	if name, _ := Field(cfg{First: &closer{}, Second: closeFunc(func() error { return nil })}); name != "" {
		t.Errorf("set config: field %q reported", name)
	}
	if name, _ := Field(cfg{private: (*closer)(nil)}); name != "" {
		t.Errorf("unexported field %q reported", name)
	}
	for _, c := range []cfg{{Second: (*closer)(nil)}, {Second: closeFunc(nil)}, {Second: closeMap(nil)}, {Second: closeChan(nil)}} {
		name, reason := Field(c)
		if name != "Second" || !strings.Contains(reason, "holds a nil ") || !strings.Contains(reason, "typednil.close") {
			t.Errorf("Field(%#v) = %q, %q; want Second, holding a nil", c, name, reason)
		}
	}
	if name, _ := Field(&cfg{Second: (*closer)(nil)}); name != "" {
		t.Errorf("a pointer to a struct: field %q reported (only structs are looked into)", name)
	}
}
