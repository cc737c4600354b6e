package console

import (
	"html"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// markup is text that is markup unless escaped.
const markup = `"'><script>alert(1)</script><img src=x onerror=alert(2)>`

// fillStrings sets every string reachable from v (exported fields of structs, nested and embedded;
// the first element of a slice of structs, made; the target of a nil pointer, made) to its path and
// markup, and records each value set by path. Maps are left empty: a page shows a record's headers
// from their list.
func fillStrings(v reflect.Value, path string, set map[string]string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(path + markup)
		set[path] = path + markup
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fillStrings(v.Elem(), path, set)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fillStrings(v.Field(i), path+"."+f.Name, set)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			fillStrings(v.Index(0), path+"[0]", set)
		}
	}
}

// Every text of the records the console shows one of (a stored message, an outbox event: every
// string field of the page's data, enumerated by reflection, the record's view and its nested lists
// included) is on its page escaped, and the page holds no markup made from them. A field a page does
// not show is listed in notShown, with why.
func TestEveryRecordFieldIsShownEscaped(t *testing.T) {
	t.Parallel()
	notShown := map[string]string{
		".M.Raw": "the hex dump of an undecodable message, shown instead of its payload (a message has one or the other)",
	}
	layoutScript := regexp.MustCompile(`<script src="[^"]*/static/console.js" defer></script>`)
	rawMarkup := regexp.MustCompile(`(?i)<\s*/?\s*(script|img|iframe)`)
	for name, data := range map[string]any{"message": &messageData{}, "outbox_event": &outboxEventData{}} {
		set := map[string]string{}
		fillStrings(reflect.ValueOf(data), "", set)
		tmpl, err := parsePage(name)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, page{Title: "t", Data: reflect.ValueOf(data).Elem().Interface()}); err != nil {
			t.Fatalf("page %s: %v", name, err)
		}
		body := b.String()
		if m := rawMarkup.FindString(layoutScript.ReplaceAllString(body, "")); m != "" {
			t.Errorf("page %s: markup %q made from a record's text:\n%s", name, m, body)
		}
		for path, v := range set {
			shown := strings.Contains(body, html.EscapeString(v))
			if why, ok := notShown[path]; ok {
				if shown {
					t.Errorf("page %s shows %s, listed as not shown (%s): update notShown", name, path, why)
				}
				continue
			}
			if !shown {
				t.Errorf("page %s does not show %s as text (%q escaped): show it, or list it in notShown with why", name, path, v)
			}
		}
		if len(set) < 10 {
			t.Fatalf("page %s: only %d texts filled: %v", name, len(set), set)
		}
	}
}
