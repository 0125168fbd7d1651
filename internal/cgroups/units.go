package cgroups

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// UnitPatterns match the units podlab's systemd driver starts: the pods'
// and the containers' scopes, podlab's pod slices and its parent slice.
var UnitPatterns = []string{ScopePrefix + "-*.scope", "podlab-*.slice", "podlab.slice"}

// UnitID is the pod or container id in the name of a unit podlab's systemd
// driver starts: podlab-<id>.scope (a pause or a container) or
// podlab-pod<id>.slice (a pod podlab placed itself); "" for another unit,
// podlab's parent slice among them.
func UnitID(name string) string {
	if id, ok := strings.CutPrefix(name, ScopePrefix+"-"); ok {
		if id, ok := strings.CutSuffix(id, ".scope"); ok {
			return id
		}
		if id, ok := strings.CutPrefix(id, "pod"); ok {
			if id, ok := strings.CutSuffix(id, ".slice"); ok && !strings.Contains(id, "-") {
				return id
			}
		}
	}
	return ""
}

// Unit is a loaded systemd unit.
type Unit struct {
	Name, ActiveState string
}

// Units lists the loaded units matching patterns (shell globs), sorted by
// name. A transient unit stays loaded while it is active or failed: a
// podlab that was killed leaves its pod slices and the scopes of
// processes still running.
func Units(ctx context.Context, patterns []string) ([]Unit, error) {
	conn, err := sddbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd: %w", err)
	}
	defer conn.Close()
	us, err := conn.ListUnitsByPatternsContext(ctx, nil, patterns)
	if err != nil {
		return nil, fmt.Errorf("listing systemd units %s: %w", strings.Join(patterns, " "), err)
	}
	var out []Unit
	for _, u := range us {
		if u.LoadState == "not-found" {
			continue
		}
		out = append(out, Unit{Name: u.Name, ActiveState: u.ActiveState})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// StopUnit stops a unit and waits for the job (a slice's stop stops every
// unit in it, killing their processes), then lets systemd forget it if it
// failed. A unit that is not loaded is already gone.
func StopUnit(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := sddbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return fmt.Errorf("connecting to systemd: %w", err)
	}
	defer conn.Close()
	done := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, name, "replace", done); err != nil {
		if isNoSuchUnit(err) {
			return nil
		}
		return fmt.Errorf("stopping unit %s: %w", name, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("stopping unit %s: job %s", name, res)
		}
	case <-ctx.Done():
		return fmt.Errorf("stopping unit %s: %w", name, ctx.Err())
	}
	if err := conn.ResetFailedUnitContext(ctx, name); err != nil && !isNoSuchUnit(err) && !isNotFailed(err) {
		return fmt.Errorf("resetting unit %s: %w", name, err)
	}
	return nil
}

func isNoSuchUnit(err error) bool { return dbusErrorIs(err, "org.freedesktop.systemd1.NoSuchUnit") }

func isNotFailed(err error) bool {
	return dbusErrorIs(err, "org.freedesktop.systemd1.UnitNotFailed") || dbusErrorIs(err, "org.freedesktop.systemd1.NoSuchUnit")
}

func dbusErrorIs(err error, name string) bool {
	var de godbus.Error
	if errors.As(err, &de) {
		return de.Name == name
	}
	var dep *godbus.Error
	return errors.As(err, &dep) && dep.Name == name
}
