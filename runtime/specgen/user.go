package specgen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/moby/sys/user"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// WithUser sets the process's user, groups included, resolved in the
// container's rootfs (see resolveUser).
func WithUser(name, rootfsPath, imageUser string, sc *runtimeapi.LinuxContainerSecurityContext) Opt {
	return func(_ context.Context, s *specs.Spec) error {
		u, err := resolveUser(rootfsPath, imageUser, sc)
		if err != nil {
			return fmt.Errorf("container %q: %w", name, err)
		}
		s.Process.User = u
		return nil
	}
}

// resolveUser is the process's user as containerd makes it: the user
// from run_as_user or run_as_username, else the image's User; its group
// from run_as_group (which needs a user), else its passwd entry's (0 for a
// uid the image does not know). Its additional groups are its primary
// group, then (policy Merge) the groups the image's /etc/group lists the
// user in, then supplemental_groups. Names are resolved in the image's
// /etc/passwd and /etc/group.
func resolveUser(rootfsPath, imageUser string, sc *runtimeapi.LinuxContainerSecurityContext) (specs.User, error) {
	spec, err := userSpec(imageUser, sc)
	if err != nil {
		return specs.User{}, err
	}
	passwd, _ := securejoin.SecureJoin(rootfsPath, "/etc/passwd")
	group, _ := securejoin.SecureJoin(rootfsPath, "/etc/group")
	eu, err := user.GetExecUserPath(spec, &user.ExecUser{}, passwd, group)
	if err != nil {
		return specs.User{}, fmt.Errorf("%s: user %q in the image's /etc/passwd and /etc/group: %w", userField(sc), spec, err)
	}
	u := specs.User{UID: uint32(eu.Uid), GID: uint32(eu.Gid)}
	gids := []int64{int64(eu.Gid)}
	if sc.SupplementalGroupsPolicy != runtimeapi.SupplementalGroupsPolicy_Strict {
		imageGroups, err := memberOf(passwd, group, eu.Uid)
		if err != nil {
			return specs.User{}, err
		}
		gids = append(gids, imageGroups...)
	}
	gids = append(gids, sc.SupplementalGroups...)
	seen := map[int64]bool{}
	for _, g := range gids {
		if !seen[g] {
			seen[g] = true
			u.AdditionalGids = append(u.AdditionalGids, uint32(g))
		}
	}
	return u, nil
}

// userSpec is the "user[:group]" the process runs as. A group with no user
// is an error, as containerd makes it: the image's user is not the one
// the group was chosen for.
func userSpec(imageUser string, sc *runtimeapi.LinuxContainerSecurityContext) (string, error) {
	spec := ""
	switch {
	case sc.RunAsUser != nil:
		spec = strconv.FormatInt(sc.RunAsUser.Value, 10)
	case sc.RunAsUsername != "":
		spec = sc.RunAsUsername
	}
	if sc.RunAsGroup != nil {
		if spec == "" {
			return "", fmt.Errorf("config.linux.security_context.run_as_group: group %d is given without run_as_user or run_as_username", sc.RunAsGroup.Value)
		}
		return spec + ":" + strconv.FormatInt(sc.RunAsGroup.Value, 10), nil
	}
	if spec == "" {
		return imageUser, nil
	}
	return spec, nil
}

func userField(sc *runtimeapi.LinuxContainerSecurityContext) string {
	switch {
	case sc.RunAsUser != nil:
		return "config.linux.security_context.run_as_user"
	case sc.RunAsUsername != "":
		return "config.linux.security_context.run_as_username"
	}
	return "image config User"
}

// memberOf is the gids of the groups in the image's /etc/group that list
// uid's user (by its name in /etc/passwd) as a member; none for a uid the
// image does not name.
func memberOf(passwd, group string, uid int) ([]int64, error) {
	users, err := user.ParsePasswdFileFilter(passwd, func(u user.User) bool { return u.Uid == uid })
	if err != nil || len(users) == 0 {
		return nil, nil // no /etc/passwd, or no entry: no name to look for
	}
	name := users[0].Name
	groups, err := user.ParseGroupFileFilter(group, func(g user.Group) bool {
		return slices.Contains(g.List, name)
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the image's /etc/group: %w", err)
	}
	var gids []int64
	for _, g := range groups {
		gids = append(gids, int64(g.Gid))
	}
	return gids, nil
}
