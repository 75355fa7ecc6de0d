package profiler

import (
	"slices"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// deliveringSink is a remote sink whose stage's replicas delivered events
// to this node's stages.
type deliveringSink struct {
	sink.Sink
	delivered map[string]uint64
}

func (d deliveringSink) Delivered() map[string]uint64 { return d.delivered }

func TestDrawDeliveries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		edges     []stage.Edge
		delivered map[string]uint64
		want      []stage.Edge
	}{
		{"part of outside's edge comes from the remote stage",
			[]stage.Edge{{From: "", To: "Send", Count: 10}, {From: "Recv", To: "Work", Count: 12}},
			map[string]uint64{"Send": 7},
			[]stage.Edge{{From: "", To: "Send", Count: 3}, {From: "Recv", To: "Work", Count: 12}, {From: "Work", To: "Send", Count: 7}}},
		{"all of it: no edge from outside left",
			[]stage.Edge{{From: "", To: "Send", Count: 10}},
			map[string]uint64{"Send": 10},
			[]stage.Edge{{From: "Work", To: "Send", Count: 10}}},
		{"counted a moment later than the edge: clamped",
			[]stage.Edge{{From: "", To: "Send", Count: 10}},
			map[string]uint64{"Send": 11},
			[]stage.Edge{{From: "Work", To: "Send", Count: 11}}},
		{"nothing delivered",
			[]stage.Edge{{From: "", To: "Send", Count: 10}},
			map[string]uint64{"Send": 0},
			[]stage.Edge{{From: "", To: "Send", Count: 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sample{Node: "front", Edges: slices.Clone(tc.edges), Remote: []StageSample{{Name: "Work", Nodes: []string{"worker"}}}}
			drawDeliveries(s, func(name string) (sink.Sink, bool) {
				return deliveringSink{delivered: tc.delivered}, name == "Work"
			})
			if !slices.Equal(s.Edges, tc.want) {
				t.Fatalf("edges %v, want %v", s.Edges, tc.want)
			}
		})
	}
}
