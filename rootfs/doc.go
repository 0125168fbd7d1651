// Package rootfs turns container images into root filesystems.
//
// A Store is a local, content-addressed image store: Import reads a plain
// rootfs directory, an OCI image layout (directory or tar), or a `docker save`
// tar, unpacks each layer once into root/layers/<sha256 of the uncompressed
// layer tar> and records the image as JSON under root/images/. Layer
// directories hold whiteouts in overlayfs form (0:0 character devices and
// trusted.overlay.opaque), the way containerd's overlay snapshotter stores
// them, so an image's layers can be stacked directly as overlay lower
// directories. MountOverlay gives each container its own writable overlay on
// top of them.
package rootfs
