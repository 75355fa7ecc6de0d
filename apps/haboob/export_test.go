package haboob

// OpenFileRefs is the number of references to the file of the open-file
// cache's entry for key (the cache's own and those of the responses
// sending it), 0 without an entry: tests see a response give its
// reference back.
func OpenFileRefs(c *PageCache, key string) int {
	c.files.mu.Lock()
	defer c.files.mu.Unlock()
	if e, ok := c.files.m[key]; ok {
		return e.file.Refs()
	}
	return 0
}
