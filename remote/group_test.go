package remote_test

import (
	"testing"

	"github.com/sandstorm-go/sandstorm/remote"
)

const groupGraph = `
global:
  cluster: {node: a}
stages:
  Limited:
    handler: t.Limited
    predicate: {type: group, group: g, rate: 100, depth: 10}
`

// A group rate is cluster-wide: the nodes using it split it evenly, and
// a node that leaves gives its share back.
func TestGroupRateIsSharedAcrossNodes(t *testing.T) {
	c := &cluster{t: t}
	ma, _ := c.node(groupGraph, "a", nil)
	if r, ok := remote.GroupShare(ma, "g"); !ok || r != 100 {
		t.Fatalf("alone: share %v %v, want 100", r, ok)
	}
	mb, nb := c.node(groupGraph, "b", nil)
	waitFor(t, "the rate split in two", func() bool {
		ra, _ := remote.GroupShare(ma, "g")
		rb, _ := remote.GroupShare(mb, "g")
		return ra == 50 && rb == 50
	})
	_ = nb.Close()
	waitFor(t, "node a's full rate back", func() bool {
		ra, _ := remote.GroupShare(ma, "g")
		return ra == 100
	})
}
