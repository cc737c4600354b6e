package worker

// SetClaimHook installs fn to run between a claim's commit and its batch transaction (nil removes it),
// with the keys of the claimed messages. Tests use it to freeze a worker at the worst moment.
func SetClaimHook(fn func(p *Pool, keys []string)) {
	if fn == nil {
		testHookClaimed = nil
		return
	}
	testHookClaimed = func(p *Pool, batch []*claimed) {
		keys := make([]string, len(batch))
		for i, c := range batch {
			keys[i] = c.Key
		}
		fn(p, keys)
	}
}
