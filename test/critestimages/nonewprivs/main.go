// Command nonewprivs is the entrypoint of the nonewprivs test image: a
// setuid-root program printing its effective uid, as upstream's does, so
// critest sees whether no_new_privs kept the setuid bit from taking effect.
package main

import (
	"fmt"
	"os"
)

func main() { fmt.Printf("Effective uid: %d\n", os.Geteuid()) }
