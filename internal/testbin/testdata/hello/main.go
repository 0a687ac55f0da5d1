// Command hello prints a greeting; testbin's tests build it.
package main

import "fmt"

func main() { fmt.Println("hello from testbin") }
