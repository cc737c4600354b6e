package inbox

// QueuedCalls returns how many Receive calls of c wait in its open group (joined, not sent yet), or
// -1 when c does not coalesce.
func QueuedCalls(c *Client) int {
	if c.co == nil {
		return -1
	}
	c.co.mu.Lock()
	defer c.co.mu.Unlock()
	if c.co.open == nil {
		return 0
	}
	return c.co.open.live
}
