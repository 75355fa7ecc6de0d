// Package configs holds Sandstorm's YAML stage configurations, embedded so
// that commands run without files beside them. Haboob is the default
// configuration of the Haboob web server (cmd/haboob).
package configs

import _ "embed"

// Haboob is configs/haboob.yaml: the Haboob stage graph.
//
//go:embed haboob.yaml
var Haboob []byte

// HaboobFile is the name Haboob's errors are reported under.
const HaboobFile = "configs/haboob.yaml"

// Gnutella is configs/gnutella.yaml: the Gnutella packet router's stage
// graph (cmd/gnutella).
//
//go:embed gnutella.yaml
var Gnutella []byte

// GnutellaFile is the name Gnutella's errors are reported under.
const GnutellaFile = "configs/gnutella.yaml"

// Arashi is configs/arashi.yaml: the Arashi e-mail service's stage graph
// (cmd/arashi).
//
//go:embed arashi.yaml
var Arashi []byte

// ArashiFile is the name Arashi's errors are reported under.
const ArashiFile = "configs/arashi.yaml"

// HaboobCluster is configs/haboob-cluster.yaml: the Haboob graph across a
// front node and worker nodes (package remote).
//
//go:embed haboob-cluster.yaml
var HaboobCluster []byte

// HaboobClusterFile is the name HaboobCluster's errors are reported under.
const HaboobClusterFile = "configs/haboob-cluster.yaml"
