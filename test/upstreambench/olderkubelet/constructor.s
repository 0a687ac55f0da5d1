// Empty: its presence lets kubelet_constructor.go declare a function without a body
// (the go:linkname to the kubelet's newManagerImpl).
