package console

// Routes returns the pattern of every route of the console's router (the list newHandler builds its
// ServeMux from), in the order they are registered.
func Routes() []string {
	out := make([]string, len(routes))
	for i, rt := range routes {
		out[i] = rt.pattern
	}
	return out
}
