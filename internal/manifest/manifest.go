package manifest

import (
	_ "github.com/google/go-cmp/cmp"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/util/validation"
	_ "k8s.io/apimachinery/pkg/util/validation/field"
	_ "sigs.k8s.io/yaml"
)
