package inspect

import (
	"github.com/podlab/podlab/internal/state"
	"github.com/podlab/podlab/runtime"
	"github.com/podlab/podlab/runtime/nri"
)

// PointNRI is where NRI plugins change a container: at CreateContainer,
// after the runtime point, in the OCI spec (as containerd and CRI-O apply
// them). Its items show from the OCI layer on.
const PointNRI = "nri"

// SourceNRI is the Source of an item an NRI plugin added; its Origin is
// the plugin's <index>-<name>.
const SourceNRI = "nri-plugin"

// NRIItems are the env vars and mounts NRI plugins added to a container,
// as CreateContainer recorded them (layers.json), each with its plugin,
// and what it replaced in a note.
func NRIItems(stored *runtime.Layers) []Item {
	if stored == nil {
		return nil
	}
	var out []Item
	for _, c := range stored.NRI {
		if c.Removed || (c.Kind != KindEnv && c.Kind != KindMount) {
			continue
		}
		it := Item{Kind: c.Kind, Name: c.Item, Value: c.Value, ReadOnly: c.ReadOnly, Source: SourceNRI, Origin: c.Plugin, Point: PointNRI}
		if c.Overrides != "" {
			it.Note = "overrides " + c.Overrides
		}
		out = append(out, it)
	}
	return out
}

// nriOverrides are the settings of c that an NRI plugin replaced or
// removed, as verify lists env overrides.
func nriOverrides(c *state.Container, stored *runtime.Layers) []Override {
	if stored == nil {
		return nil
	}
	var out []Override
	for _, ch := range stored.NRI {
		if ch.Overrides != "" {
			out = append(out, Override{Container: containerLabel(c), Message: ch.String()})
		}
	}
	return out
}

// nriChanges are what NRI plugins changed in c, for the report.
func nriChanges(stored *runtime.Layers) []nri.Change {
	if stored == nil {
		return nil
	}
	return stored.NRI
}
