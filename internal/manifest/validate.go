package manifest

import (
	"fmt"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Validation mirrors the API server's (k8s.io/kubernetes pkg/apis/core/
// validation) for the fields podlab uses, with its messages, plus what
// podlab needs on top: every ConfigMap/Secret reference must resolve inside
// the manifest, since there is no cluster to fetch it from.

var (
	restartPolicies          = []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}
	dnsPolicies              = []corev1.DNSPolicy{corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone}
	pullPolicies             = []corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}
	terminationMessagePolicy = []corev1.TerminationMessagePolicy{corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError}
	protocols                = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	propagationModes         = []corev1.MountPropagationMode{corev1.MountPropagationNone, corev1.MountPropagationHostToContainer, corev1.MountPropagationBidirectional}
	storageMediums           = []corev1.StorageMedium{corev1.StorageMediumDefault, corev1.StorageMediumMemory}
	hostPathTypes            = []corev1.HostPathType{
		corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFileOrCreate,
		corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev,
	}
	// The volume types podlab can build; the rest need a cluster or a driver.
	supportedVolumeTypes = []string{"configMap", "downwardAPI", "emptyDir", "hostPath", "image", "projected", "secret"}
	supportedProjections = []string{"configMap", "downwardAPI", "secret"}

	// Downward API paths the runtime resolves, for env and for volume files.
	envFieldPaths = []string{
		"metadata.name", "metadata.namespace", "metadata.uid",
		"spec.nodeName", "spec.serviceAccountName",
		"status.hostIP", "status.podIP", "status.podIPs",
	}
	volumeFieldPaths = []string{
		"metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid",
	}
	resourceFieldResources = []string{
		"limits.cpu", "limits.ephemeral-storage", "limits.memory",
		"requests.cpu", "requests.ephemeral-storage", "requests.memory",
	}
	// metadata.labels['key'] and metadata.annotations['key'].
	subscriptedFieldPath = regexp.MustCompile(`^(metadata\.(?:labels|annotations))\['(.*)'\]$`)
)

const (
	fileModeErrorMsg = "must be a number between 0 and 0777 (octal), both inclusive"
	maxPodNameLength = validation.DNS1123LabelMaxLength
)

type podValidator struct {
	pod        *corev1.Pod
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	containers sets.Set[string]
	errs       field.ErrorList
}

func validatePod(pod *corev1.Pod, cms map[string]*corev1.ConfigMap, secrets map[string]*corev1.Secret) field.ErrorList {
	v := &podValidator{pod: pod, configMaps: cms, secrets: secrets, containers: sets.New[string]()}
	md := field.NewPath("metadata")
	v.errs = apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, md)
	if len(pod.Name) > maxPodNameLength {
		v.add(field.Invalid(md.Child("name"), pod.Name,
			fmt.Sprintf("must be no more than %d characters: podlab uses the pod name as the hostname", maxPodNameLength)))
	}
	v.spec(field.NewPath("spec"))
	return v.errs
}

func (v *podValidator) add(errs ...*field.Error) { v.errs = append(v.errs, errs...) }

func (v *podValidator) spec(p *field.Path) {
	s := &v.pod.Spec
	for _, c := range s.InitContainers {
		v.containers.Insert(c.Name)
	}
	for _, c := range s.Containers {
		v.containers.Insert(c.Name)
	}
	volumes := v.volumes(s.Volumes, p.Child("volumes"))

	if len(s.Containers) == 0 {
		v.add(field.Required(p.Child("containers"), "must have at least one container"))
	}
	seen := sets.New[string]()
	for i := range s.InitContainers {
		v.container(&s.InitContainers[i], p.Child("initContainers").Index(i), volumes, seen)
	}
	for i := range s.Containers {
		v.container(&s.Containers[i], p.Child("containers").Index(i), volumes, seen)
	}

	if !slices.Contains(restartPolicies, s.RestartPolicy) {
		v.add(field.NotSupported(p.Child("restartPolicy"), s.RestartPolicy, restartPolicies))
	}
	if !slices.Contains(dnsPolicies, s.DNSPolicy) {
		v.add(field.NotSupported(p.Child("dnsPolicy"), s.DNSPolicy, dnsPolicies))
	}
	if g := s.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		v.add(field.Invalid(p.Child("terminationGracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}
	if d := s.ActiveDeadlineSeconds; d != nil && *d < 1 {
		v.add(field.Invalid(p.Child("activeDeadlineSeconds"), *d, "must be greater than or equal to 1"))
	}
	v.dnsLabel(p.Child("hostname"), s.Hostname)
	v.dnsLabel(p.Child("subdomain"), s.Subdomain)
	if s.ServiceAccountName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(s.ServiceAccountName) {
			v.add(field.Invalid(p.Child("serviceAccountName"), s.ServiceAccountName, msg))
		}
	}
	if s.NodeName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(s.NodeName) {
			v.add(field.Invalid(p.Child("nodeName"), s.NodeName, msg))
		}
	}
	if s.HostUsers != nil && !*s.HostUsers {
		// As the API server's validateHostUsers: a pod's user namespace
		// with the node's network, PID or IPC namespace is refused.
		for _, h := range []struct {
			name string
			set  bool
		}{{"hostNetwork", s.HostNetwork}, {"hostPID", s.HostPID}, {"hostIPC", s.HostIPC}} {
			if h.set {
				v.add(field.Forbidden(p.Child(h.name), "when `hostUsers` is false"))
			}
		}
	}
	if s.ShareProcessNamespace != nil && *s.ShareProcessNamespace && s.HostPID {
		v.add(field.Invalid(p.Child("shareProcessNamespace"), true, "ShareProcessNamespace and HostPID cannot both be enabled"))
	}
	if sc := s.SecurityContext; sc != nil {
		scp := p.Child("securityContext")
		v.id(scp.Child("runAsUser"), sc.RunAsUser, validation.IsValidUserID)
		v.id(scp.Child("runAsGroup"), sc.RunAsGroup, validation.IsValidGroupID)
		v.id(scp.Child("fsGroup"), sc.FSGroup, validation.IsValidGroupID)
		for i, g := range sc.SupplementalGroups {
			v.id(scp.Child("supplementalGroups").Index(i), &g, validation.IsValidGroupID)
		}
		v.seccompProfile(scp.Child("seccompProfile"), sc.SeccompProfile)
		v.appArmorProfile(scp.Child("appArmorProfile"), sc.AppArmorProfile)
	}
	v.nonRoot(p)
}

func (v *podValidator) dnsLabel(p *field.Path, s string) {
	if s == "" {
		return
	}
	for _, msg := range validation.IsDNS1123Label(s) {
		v.add(field.Invalid(p, s, msg))
	}
}

func (v *podValidator) id(p *field.Path, id *int64, check func(int64) []string) {
	if id == nil {
		return
	}
	for _, msg := range check(*id) {
		v.add(field.Invalid(p, *id, msg))
	}
}

// nonRoot rejects runAsNonRoot with an explicit runAsUser of 0 (the kubelet
// would refuse to start such a container; podlab says so up front). The
// container's settings override the pod's, field by field.
func (v *podValidator) nonRoot(p *field.Path) {
	s := &v.pod.Spec
	var podNonRoot *bool
	var podUser *int64
	if sc := s.SecurityContext; sc != nil {
		podNonRoot, podUser = sc.RunAsNonRoot, sc.RunAsUser
	}
	reported := sets.New[string]()
	check := func(c *corev1.Container, cp *field.Path) {
		nonRoot, user := podNonRoot, podUser
		userPath := p.Child("securityContext", "runAsUser")
		if sc := c.SecurityContext; sc != nil {
			if sc.RunAsNonRoot != nil {
				nonRoot = sc.RunAsNonRoot
			}
			if sc.RunAsUser != nil {
				user, userPath = sc.RunAsUser, cp.Child("securityContext", "runAsUser")
			}
		}
		if nonRoot == nil || !*nonRoot || user == nil || *user != 0 || reported.Has(userPath.String()) {
			return
		}
		reported.Insert(userPath.String())
		v.add(field.Invalid(userPath, *user, "must not be 0 when runAsNonRoot is true"))
	}
	for i := range s.InitContainers {
		check(&s.InitContainers[i], p.Child("initContainers").Index(i))
	}
	for i := range s.Containers {
		check(&s.Containers[i], p.Child("containers").Index(i))
	}
}

func (v *podValidator) container(c *corev1.Container, p *field.Path, volumes sets.Set[string], seen sets.Set[string]) {
	switch {
	case c.Name == "":
		v.add(field.Required(p.Child("name"), ""))
	case len(validation.IsDNS1123Label(c.Name)) > 0:
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			v.add(field.Invalid(p.Child("name"), c.Name, msg))
		}
	case seen.Has(c.Name):
		v.add(field.Duplicate(p.Child("name"), c.Name))
	}
	seen.Insert(c.Name)
	for i, a := range c.Command {
		v.varRefs(p.Child("command").Index(i), a)
	}
	for i, a := range c.Args {
		v.varRefs(p.Child("args").Index(i), a)
	}

	if c.Image == "" {
		v.add(field.Required(p.Child("image"), ""))
	} else if strings.TrimSpace(c.Image) != c.Image {
		v.add(field.Invalid(p.Child("image"), c.Image, "must not have leading or trailing whitespace"))
	}
	if !slices.Contains(pullPolicies, c.ImagePullPolicy) {
		v.add(field.NotSupported(p.Child("imagePullPolicy"), c.ImagePullPolicy, pullPolicies))
	}
	if !slices.Contains(terminationMessagePolicy, c.TerminationMessagePolicy) {
		v.add(field.NotSupported(p.Child("terminationMessagePolicy"), c.TerminationMessagePolicy, terminationMessagePolicy))
	}
	v.ports(c.Ports, p.Child("ports"))
	for i := range c.Env {
		v.envVar(&c.Env[i], p.Child("env").Index(i))
	}
	for i := range c.EnvFrom {
		v.envFrom(&c.EnvFrom[i], p.Child("envFrom").Index(i))
	}
	v.resources(&c.Resources, p.Child("resources"))
	v.volumeMounts(c.VolumeMounts, p.Child("volumeMounts"), volumes)
	if sc := c.SecurityContext; sc != nil {
		scp := p.Child("securityContext")
		v.id(scp.Child("runAsUser"), sc.RunAsUser, validation.IsValidUserID)
		v.id(scp.Child("runAsGroup"), sc.RunAsGroup, validation.IsValidGroupID)
		if sc.Privileged != nil && *sc.Privileged && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
			v.add(field.Invalid(scp, "", "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
		}
		v.seccompProfile(scp.Child("seccompProfile"), sc.SeccompProfile)
		v.appArmorProfile(scp.Child("appArmorProfile"), sc.AppArmorProfile)
	}
}

func (v *podValidator) ports(ports []corev1.ContainerPort, p *field.Path) {
	names := sets.New[string]()
	for i, port := range ports {
		pp := p.Index(i)
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			v.add(field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				v.add(field.Invalid(pp.Child("hostPort"), port.HostPort, msg))
			}
		}
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				v.add(field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if names.Has(port.Name) {
				v.add(field.Duplicate(pp.Child("name"), port.Name))
			}
			names.Insert(port.Name)
		}
		if !slices.Contains(protocols, port.Protocol) {
			v.add(field.NotSupported(pp.Child("protocol"), port.Protocol, protocols))
		}
		if port.HostIP != "" {
			v.add(validation.IsValidIP(pp.Child("hostIP"), port.HostIP)...)
		}
	}
}

func (v *podValidator) envVar(e *corev1.EnvVar, p *field.Path) {
	if e.Name == "" {
		v.add(field.Required(p.Child("name"), ""))
	} else {
		// The API server's current rule (RelaxedEnvironmentVariableValidation,
		// GA): printable ASCII without '='; what execve can carry.
		for _, msg := range validation.IsRelaxedEnvVarName(e.Name) {
			v.add(field.Invalid(p.Child("name"), e.Name, msg))
		}
	}
	v.varRefs(p.Child("value"), e.Value)
	vf := e.ValueFrom
	if vf == nil {
		return
	}
	vp := p.Child("valueFrom")
	if e.Value != "" {
		v.add(field.Invalid(vp, "", "may not be specified when `value` is not empty"))
	}
	n := 0
	if vf.FieldRef != nil {
		n++
		v.fieldRef(vf.FieldRef, vp.Child("fieldRef"), envFieldPaths, true)
	}
	if vf.ResourceFieldRef != nil {
		n++
		v.resourceFieldRef(vf.ResourceFieldRef, vp.Child("resourceFieldRef"), false)
	}
	if r := vf.ConfigMapKeyRef; r != nil {
		n++
		rp := vp.Child("configMapKeyRef")
		if v.nameAndKey(r.Name, r.Key, rp) && !isTrue(r.Optional) {
			v.configMapKeys(r.Name, rp.Child("name"), []string{r.Key}, []*field.Path{rp.Child("key")})
		}
	}
	if r := vf.SecretKeyRef; r != nil {
		n++
		rp := vp.Child("secretKeyRef")
		if v.nameAndKey(r.Name, r.Key, rp) && !isTrue(r.Optional) {
			v.secretKeys(r.Name, rp.Child("name"), []string{r.Key}, []*field.Path{rp.Child("key")})
		}
	}
	if vf.FileKeyRef != nil {
		n++
		v.add(field.Forbidden(vp.Child("fileKeyRef"), "not supported by podlab"))
	}
	switch {
	case n == 0:
		v.add(field.Invalid(vp, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"))
	case n > 1:
		v.add(field.Invalid(vp, "", "may not have more than one field specified at a time"))
	}
}

// nameAndKey checks a key selector's name and key; it reports whether both
// are usable for a lookup.
func (v *podValidator) nameAndKey(name, key string, p *field.Path) bool {
	ok := true
	if name == "" {
		v.add(field.Required(p.Child("name"), ""))
		ok = false
	}
	if key == "" {
		v.add(field.Required(p.Child("key"), ""))
		return false
	}
	for _, msg := range validation.IsConfigMapKey(key) {
		v.add(field.Invalid(p.Child("key"), key, msg))
		ok = false
	}
	return ok
}

func (v *podValidator) envFrom(ef *corev1.EnvFromSource, p *field.Path) {
	if ef.Prefix != "" {
		for _, msg := range validation.IsRelaxedEnvVarName(ef.Prefix) {
			v.add(field.Invalid(p.Child("prefix"), ef.Prefix, msg))
		}
	}
	n := 0
	if r := ef.ConfigMapRef; r != nil {
		n++
		if r.Name == "" {
			v.add(field.Required(p.Child("configMapRef", "name"), ""))
		} else if !isTrue(r.Optional) {
			v.configMapKeys(r.Name, p.Child("configMapRef", "name"), nil, nil)
		}
	}
	if r := ef.SecretRef; r != nil {
		n++
		if r.Name == "" {
			v.add(field.Required(p.Child("secretRef", "name"), ""))
		} else if !isTrue(r.Optional) {
			v.secretKeys(r.Name, p.Child("secretRef", "name"), nil, nil)
		}
	}
	switch {
	case n == 0:
		v.add(field.Invalid(p, "", "must specify one of: `configMapRef` or `secretRef`"))
	case n > 1:
		v.add(field.Invalid(p, "", "may not have more than one field specified at a time"))
	}
}

// configMapKeys reports a ConfigMap missing from the manifest, or keys
// missing from it. Callers skip it for optional references.
func (v *podValidator) configMapKeys(name string, namePath *field.Path, keys []string, keyPaths []*field.Path) {
	cm, ok := v.configMaps[name]
	if !ok {
		v.add(notFound(namePath, name, "no ConfigMap of that name in the manifest"))
		return
	}
	for i, k := range keys {
		_, inData := cm.Data[k]
		_, inBinary := cm.BinaryData[k]
		if !inData && !inBinary {
			v.add(notFound(keyPaths[i], k, fmt.Sprintf("no such key in ConfigMap %q", name)))
		}
	}
}

func (v *podValidator) secretKeys(name string, namePath *field.Path, keys []string, keyPaths []*field.Path) {
	s, ok := v.secrets[name]
	if !ok {
		v.add(notFound(namePath, name, "no Secret of that name in the manifest"))
		return
	}
	for i, k := range keys {
		if _, ok := s.Data[k]; !ok {
			v.add(notFound(keyPaths[i], k, fmt.Sprintf("no such key in Secret %q", name)))
		}
	}
}

func notFound(p *field.Path, value, detail string) *field.Error {
	e := field.NotFound(p, value)
	e.Detail = detail + " (mark the reference optional: true if that is intended)"
	return e
}

func (v *podValidator) fieldRef(fr *corev1.ObjectFieldSelector, p *field.Path, allowed []string, env bool) {
	if fr.APIVersion != "v1" {
		v.add(field.NotSupported(p.Child("apiVersion"), fr.APIVersion, []string{"v1"}))
	}
	fp := p.Child("fieldPath")
	if fr.FieldPath == "" {
		v.add(field.Required(fp, ""))
		return
	}
	if m := subscriptedFieldPath.FindStringSubmatch(fr.FieldPath); m != nil {
		key := m[2]
		if m[1] == "metadata.annotations" {
			key = strings.ToLower(key) // annotation keys are case-insensitive
		}
		for _, msg := range content.IsLabelKey(key) {
			v.add(field.Invalid(fp, fr.FieldPath, msg))
		}
		return
	}
	if !slices.Contains(allowed, fr.FieldPath) {
		valid := slices.Clone(allowed)
		if env {
			valid = append(valid, "metadata.labels['<KEY>']", "metadata.annotations['<KEY>']")
		}
		v.add(field.NotSupported(fp, fr.FieldPath, valid))
	}
}

func (v *podValidator) resourceFieldRef(r *corev1.ResourceFieldSelector, p *field.Path, needContainer bool) {
	if r.ContainerName == "" {
		if needContainer {
			v.add(field.Required(p.Child("containerName"), ""))
		}
	} else if !v.containers.Has(r.ContainerName) {
		v.add(field.NotFound(p.Child("containerName"), r.ContainerName))
	}
	if r.Resource == "" {
		v.add(field.Required(p.Child("resource"), ""))
		return
	}
	if !slices.Contains(resourceFieldResources, r.Resource) {
		v.add(field.NotSupported(p.Child("resource"), r.Resource, resourceFieldResources))
		return
	}
	if r.Divisor.IsZero() {
		return
	}
	if strings.HasSuffix(r.Resource, ".cpu") {
		if !divisorIn(r.Divisor, "1m", "1") {
			v.add(field.Invalid(p.Child("divisor"), r.Divisor.String(), "only divisor's values 1m and 1 are supported with the cpu resource"))
		}
	} else if !divisorIn(r.Divisor, "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei") {
		v.add(field.Invalid(p.Child("divisor"), r.Divisor.String(), "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the memory resource"))
	}
}

func divisorIn(q resource.Quantity, allowed ...string) bool {
	for _, a := range allowed {
		if q.Cmp(resource.MustParse(a)) == 0 {
			return true
		}
	}
	return false
}

func (v *podValidator) resources(r *corev1.ResourceRequirements, p *field.Path) {
	check := func(list corev1.ResourceList, lp *field.Path) {
		for _, name := range sortedKeys(list) {
			q := list[name]
			for _, msg := range content.IsLabelKey(string(name)) {
				v.add(field.Invalid(lp.Key(string(name)), name, msg))
			}
			if q.Sign() < 0 {
				v.add(field.Invalid(lp.Key(string(name)), q.String(), "must be greater than or equal to 0"))
			}
		}
	}
	check(r.Limits, p.Child("limits"))
	check(r.Requests, p.Child("requests"))
	for _, name := range sortedKeys(r.Requests) {
		req := r.Requests[name]
		if limit, ok := r.Limits[name]; ok && req.Cmp(limit) > 0 {
			v.add(field.Invalid(p.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
		}
	}
}

func (v *podValidator) volumeMounts(mounts []corev1.VolumeMount, p *field.Path, volumes sets.Set[string]) {
	mountPaths := sets.New[string]()
	for i, m := range mounts {
		mp := p.Index(i)
		if m.Name == "" {
			v.add(field.Required(mp.Child("name"), ""))
		} else if !volumes.Has(m.Name) {
			v.add(field.NotFound(mp.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			v.add(field.Required(mp.Child("mountPath"), ""))
		} else {
			if !path.IsAbs(m.MountPath) {
				v.add(field.Invalid(mp.Child("mountPath"), m.MountPath, "must be an absolute path"))
			}
			v.noBacksteps(mp.Child("mountPath"), m.MountPath)
			if clean := path.Clean(m.MountPath); mountPaths.Has(clean) {
				v.add(field.Invalid(mp.Child("mountPath"), m.MountPath, "must be unique"))
			} else {
				mountPaths.Insert(clean)
			}
		}
		if m.SubPath != "" {
			v.relativePath(mp.Child("subPath"), m.SubPath)
		}
		if m.SubPath != "" && m.SubPathExpr != "" {
			v.add(field.Invalid(mp.Child("subPathExpr"), m.SubPathExpr, "subPathExpr and subPath are mutually exclusive"))
		}
		if m.MountPropagation != nil && !slices.Contains(propagationModes, *m.MountPropagation) {
			v.add(field.NotSupported(mp.Child("mountPropagation"), *m.MountPropagation, propagationModes))
		}
	}
}

// relativePath is the API server's validateLocalDescendingPath: the path
// stays inside the directory it is joined to.
// seccompProfile checks a seccompProfile as the API server does: a known
// type; a localhostProfile, a relative path without '..', for Localhost
// and for it only.
func (v *podValidator) seccompProfile(p *field.Path, sp *corev1.SeccompProfile) {
	if sp == nil {
		return
	}
	types := []corev1.SeccompProfileType{corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined, corev1.SeccompProfileTypeLocalhost}
	switch {
	case sp.Type == "":
		v.add(field.Required(p.Child("type"), ""))
	case !slices.Contains(types, sp.Type):
		v.add(field.NotSupported(p.Child("type"), sp.Type, types))
	case sp.Type == corev1.SeccompProfileTypeLocalhost:
		if sp.LocalhostProfile == nil || *sp.LocalhostProfile == "" {
			v.add(field.Required(p.Child("localhostProfile"), "must be set when seccomp type is Localhost"))
		} else {
			v.relativePath(p.Child("localhostProfile"), *sp.LocalhostProfile)
		}
	case sp.LocalhostProfile != nil:
		v.add(field.Invalid(p.Child("localhostProfile"), *sp.LocalhostProfile, "can only be set when seccomp type is Localhost"))
	}
}

// appArmorProfile checks an appArmorProfile as the API server does: a
// known type; a localhostProfile for Localhost and for it only.
func (v *podValidator) appArmorProfile(p *field.Path, ap *corev1.AppArmorProfile) {
	if ap == nil {
		return
	}
	types := []corev1.AppArmorProfileType{corev1.AppArmorProfileTypeRuntimeDefault, corev1.AppArmorProfileTypeUnconfined, corev1.AppArmorProfileTypeLocalhost}
	switch {
	case ap.Type == "":
		v.add(field.Required(p.Child("type"), ""))
	case !slices.Contains(types, ap.Type):
		v.add(field.NotSupported(p.Child("type"), ap.Type, types))
	case ap.Type == corev1.AppArmorProfileTypeLocalhost:
		if ap.LocalhostProfile == nil || strings.TrimSpace(*ap.LocalhostProfile) == "" {
			v.add(field.Required(p.Child("localhostProfile"), "must be set when AppArmor type is Localhost"))
		}
	case ap.LocalhostProfile != nil:
		v.add(field.Invalid(p.Child("localhostProfile"), *ap.LocalhostProfile, "can only be set when AppArmor type is Localhost"))
	}
}

func (v *podValidator) relativePath(p *field.Path, s string) {
	if path.IsAbs(s) {
		v.add(field.Invalid(p, s, "must be a relative path"))
	}
	v.noBacksteps(p, s)
}

func (v *podValidator) noBacksteps(p *field.Path, s string) {
	// Split on '\' too, as the API server does: a manifest is not only for Linux.
	for _, elem := range strings.FieldsFunc(s, func(r rune) bool { return r == '/' || r == '\\' }) {
		if elem == ".." {
			v.add(field.Invalid(p, s, "must not contain '..'"))
			return
		}
	}
}

// volumeSourceNames lists the JSON names of the sources set in vs.
func volumeSourceNames(vs *corev1.VolumeSource) []string {
	return setPointerFields(reflect.ValueOf(vs).Elem())
}

func countVolumeSources(vs *corev1.VolumeSource) int { return len(volumeSourceNames(vs)) }

func setPointerFields(rv reflect.Value) []string {
	var names []string
	for i := range rv.NumField() {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
			names = append(names, name)
		}
	}
	return names
}

func (v *podValidator) volumes(volumes []corev1.Volume, p *field.Path) sets.Set[string] {
	names := sets.New[string]()
	for i := range volumes {
		vol := &volumes[i]
		vp := p.Index(i)
		switch {
		case vol.Name == "":
			v.add(field.Required(vp.Child("name"), ""))
		case len(validation.IsDNS1123Label(vol.Name)) > 0:
			for _, msg := range validation.IsDNS1123Label(vol.Name) {
				v.add(field.Invalid(vp.Child("name"), vol.Name, msg))
			}
		case names.Has(vol.Name):
			v.add(field.Duplicate(vp.Child("name"), vol.Name))
		}
		names.Insert(vol.Name)

		kinds := volumeSourceNames(&vol.VolumeSource)
		if len(kinds) > 1 {
			v.add(field.Forbidden(vp, fmt.Sprintf("may not specify more than 1 volume type (found %s)", strings.Join(kinds, ", "))))
			continue
		}
		if len(kinds) == 0 || !slices.Contains(supportedVolumeTypes, kinds[0]) {
			v.add(field.NotSupported(vp, strings.Join(kinds, ""), supportedVolumeTypes))
			continue
		}
		vs := &vol.VolumeSource
		switch {
		case vs.HostPath != nil:
			v.hostPath(vs.HostPath, vp.Child("hostPath"))
		case vs.EmptyDir != nil:
			ep := vp.Child("emptyDir")
			if !slices.Contains(storageMediums, vs.EmptyDir.Medium) {
				v.add(field.NotSupported(ep.Child("medium"), vs.EmptyDir.Medium, storageMediums))
			}
			if l := vs.EmptyDir.SizeLimit; l != nil && l.Sign() < 0 {
				v.add(field.Invalid(ep.Child("sizeLimit"), l.String(), "must be greater than or equal to 0"))
			}
		case vs.ConfigMap != nil:
			cp := vp.Child("configMap")
			v.mode(cp.Child("defaultMode"), vs.ConfigMap.DefaultMode)
			v.configMapSource(vs.ConfigMap.Name, vs.ConfigMap.Items, vs.ConfigMap.Optional, cp, sets.New[string]())
		case vs.Secret != nil:
			sp := vp.Child("secret")
			v.mode(sp.Child("defaultMode"), vs.Secret.DefaultMode)
			v.secretSource(vs.Secret.SecretName, "secretName", vs.Secret.Items, vs.Secret.Optional, sp, sets.New[string]())
		case vs.DownwardAPI != nil:
			dp := vp.Child("downwardAPI")
			v.mode(dp.Child("defaultMode"), vs.DownwardAPI.DefaultMode)
			v.downwardAPIFiles(vs.DownwardAPI.Items, dp.Child("items"), sets.New[string]())
		case vs.Projected != nil:
			v.projected(vs.Projected, vp.Child("projected"))
		case vs.Image != nil:
			ip := vp.Child("image")
			if vs.Image.Reference == "" {
				v.add(field.Required(ip.Child("reference"), ""))
			}
			if !slices.Contains(pullPolicies, vs.Image.PullPolicy) {
				v.add(field.NotSupported(ip.Child("pullPolicy"), vs.Image.PullPolicy, pullPolicies))
			}
		}
	}
	return names
}

func (v *podValidator) hostPath(hp *corev1.HostPathVolumeSource, p *field.Path) {
	if hp.Path == "" {
		v.add(field.Required(p.Child("path"), ""))
	} else {
		if !path.IsAbs(hp.Path) {
			v.add(field.Invalid(p.Child("path"), hp.Path, "must be an absolute path"))
		}
		v.noBacksteps(p.Child("path"), hp.Path)
	}
	if hp.Type != nil && !slices.Contains(hostPathTypes, *hp.Type) {
		v.add(field.NotSupported(p.Child("type"), *hp.Type, hostPathTypes))
	}
}

func (v *podValidator) mode(p *field.Path, mode *int32) {
	if mode != nil && (*mode < 0 || *mode > 0777) {
		v.add(field.Invalid(p, *mode, fileModeErrorMsg))
	}
}

func (v *podValidator) configMapSource(name string, items []corev1.KeyToPath, optional *bool, p *field.Path, paths sets.Set[string]) {
	if name == "" {
		v.add(field.Required(p.Child("name"), ""))
	}
	keys, keyPaths := v.keyToPaths(items, p.Child("items"), paths)
	if name != "" && !isTrue(optional) {
		v.configMapKeys(name, p.Child("name"), keys, keyPaths)
	}
}

func (v *podValidator) secretSource(name, nameField string, items []corev1.KeyToPath, optional *bool, p *field.Path, paths sets.Set[string]) {
	if name == "" {
		v.add(field.Required(p.Child(nameField), ""))
	}
	keys, keyPaths := v.keyToPaths(items, p.Child("items"), paths)
	if name != "" && !isTrue(optional) {
		v.secretKeys(name, p.Child(nameField), keys, keyPaths)
	}
}

// keyToPaths validates items and returns the valid keys (with their paths)
// for the lookup in the referenced object.
func (v *podValidator) keyToPaths(items []corev1.KeyToPath, p *field.Path, paths sets.Set[string]) ([]string, []*field.Path) {
	var keys []string
	var keyPaths []*field.Path
	for i, it := range items {
		ip := p.Index(i)
		if it.Key == "" {
			v.add(field.Required(ip.Child("key"), ""))
		} else if msgs := validation.IsConfigMapKey(it.Key); len(msgs) > 0 {
			for _, msg := range msgs {
				v.add(field.Invalid(ip.Child("key"), it.Key, msg))
			}
		} else {
			keys = append(keys, it.Key)
			keyPaths = append(keyPaths, ip.Child("key"))
		}
		v.filePath(ip.Child("path"), it.Path, paths)
		v.mode(ip.Child("mode"), it.Mode)
	}
	return keys, keyPaths
}

// filePath checks a file path inside a configMap/secret/downwardAPI/projected
// volume: relative, no '..' element, not starting with '..' (the kubelet's
// atomic writer keeps its own ..data entries there), unique in the volume.
func (v *podValidator) filePath(p *field.Path, s string, paths sets.Set[string]) {
	if s == "" {
		v.add(field.Required(p, ""))
		return
	}
	v.relativePath(p, s)
	if strings.HasPrefix(s, "..") {
		v.add(field.Invalid(p, s, "must not start with '..'"))
	}
	if clean := path.Clean(s); paths.Has(clean) {
		v.add(field.Invalid(p, s, "conflicting duplicate paths"))
	} else {
		paths.Insert(clean)
	}
}

func (v *podValidator) downwardAPIFiles(items []corev1.DownwardAPIVolumeFile, p *field.Path, paths sets.Set[string]) {
	for i := range items {
		it := &items[i]
		ip := p.Index(i)
		v.filePath(ip.Child("path"), it.Path, paths)
		v.mode(ip.Child("mode"), it.Mode)
		switch {
		case it.FieldRef != nil && it.ResourceFieldRef != nil:
			v.add(field.Invalid(ip, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		case it.FieldRef != nil:
			v.fieldRef(it.FieldRef, ip.Child("fieldRef"), volumeFieldPaths, false)
		case it.ResourceFieldRef != nil:
			v.resourceFieldRef(it.ResourceFieldRef, ip.Child("resourceFieldRef"), true)
		default:
			v.add(field.Required(ip, "one of fieldRef and resourceFieldRef is required"))
		}
	}
}

func (v *podValidator) projected(pr *corev1.ProjectedVolumeSource, p *field.Path) {
	v.mode(p.Child("defaultMode"), pr.DefaultMode)
	paths := sets.New[string]() // files of all sources share one directory
	for i := range pr.Sources {
		src := &pr.Sources[i]
		sp := p.Child("sources").Index(i)
		kinds := setPointerFields(reflect.ValueOf(src).Elem())
		switch {
		case len(kinds) == 0:
			v.add(field.Required(sp, "must specify one of: `configMap`, `downwardAPI` or `secret`"))
			continue
		case len(kinds) > 1:
			v.add(field.Forbidden(sp, fmt.Sprintf("may not specify more than 1 volume type per source (found %s)", strings.Join(kinds, ", "))))
			continue
		case !slices.Contains(supportedProjections, kinds[0]):
			v.add(field.NotSupported(sp, kinds[0], supportedProjections))
			continue
		}
		switch {
		case src.ConfigMap != nil:
			v.configMapSource(src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, sp.Child("configMap"), paths)
		case src.Secret != nil:
			v.secretSource(src.Secret.Name, "name", src.Secret.Items, src.Secret.Optional, sp.Child("secret"), paths)
		case src.DownwardAPI != nil:
			v.downwardAPIFiles(src.DownwardAPI.Items, sp.Child("downwardAPI", "items"), paths)
		}
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

func validateConfigMap(cm *corev1.ConfigMap, podNamespace string) field.ErrorList {
	errs := validateObjectMeta(&cm.ObjectMeta, podNamespace)
	for _, k := range sortedKeys(cm.Data) {
		errs = append(errs, validateKey(field.NewPath("data").Key(k), k)...)
	}
	for _, k := range sortedKeys(cm.BinaryData) {
		errs = append(errs, validateKey(field.NewPath("binaryData").Key(k), k)...)
		if _, dup := cm.Data[k]; dup {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(k), k, "duplicate of key present in data"))
		}
	}
	return errs
}

func validateSecret(s *corev1.Secret, podNamespace string) field.ErrorList {
	errs := validateObjectMeta(&s.ObjectMeta, podNamespace)
	for _, k := range sortedKeys(s.Data) {
		errs = append(errs, validateKey(field.NewPath("data").Key(k), k)...)
	}
	for _, k := range sortedKeys(s.StringData) {
		errs = append(errs, validateKey(field.NewPath("stringData").Key(k), k)...)
	}
	return errs
}

func validateObjectMeta(md *metav1.ObjectMeta, podNamespace string) field.ErrorList {
	p := field.NewPath("metadata")
	errs := apivalidation.ValidateObjectMeta(md, true, apivalidation.NameIsDNSSubdomain, p)
	// Only the pod's namespace is visible to it.
	if md.Namespace != podNamespace {
		errs = append(errs, field.Invalid(p.Child("namespace"), md.Namespace, fmt.Sprintf("must be the Pod's namespace %q", podNamespace)))
	}
	return errs
}

func validateKey(p *field.Path, k string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsConfigMapKey(k) {
		errs = append(errs, field.Invalid(p, k, msg))
	}
	return errs
}

// varRefs rejects malformed $(VAR) references: an unterminated "$(" or an
// empty "$()". The kubelet would pass them through as literal text, which
// is almost always a typo; "$$(" stays the escape for a literal "$(".
func (v *podValidator) varRefs(p *field.Path, s string) {
	for i := 0; i < len(s)-1; i++ {
		if s[i] != '$' {
			continue
		}
		switch s[i+1] {
		case '$':
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			switch {
			case end < 0:
				v.add(field.Invalid(p, s, "unterminated $(VAR) reference (write $$( for a literal $()"))
				return
			case end == 0:
				v.add(field.Invalid(p, s, "empty $() reference"))
			}
			if end > 0 {
				i += end + 2
			}
		}
	}
}
