// Package deploy holds what `make install` puts on a node besides the binaries: the systemd
// units kdm.service and kdm-nvml-plugin.service, with @BINDIR@ and @SYSCONFDIR@ for the
// Makefile to fill in, and their flags files (kdm.env and kdm-nvml-plugin.env, installed as
// <sysconfdir>/default/kdm and .../kdm-nvml-plugin). It has no Go code; its test checks the
// units as installed.
package deploy
