package hdr

import "testing"

func TestToken(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"traceparent": true, "X-Tenant_ID.v2": true, "a!#$%&'*+-.^_`|~z": true,
		"": false, "bad name": false, "a:b": false, "é": false, "tab\t": false, "(x)": false,
	} {
		if got := Token(name); got != want {
			t.Errorf("Token(%q) = %v, want %v", name, got, want)
		}
	}
}
