package remote

// DirectSubject is the subject on which node n's replica of stage takes
// the requests addressed to it alone (for the tests of package
// remote_test).
func DirectSubject(n *Node, stage string) string { return n.directSubject(stage, n.inst) }
