package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"
)

// Device IDs are often long and alike: the go-nvml mock's GPUs are GPU-a100a100-0000-4000-8000-
// 00000000000 followed by one digit, while a real node's GPU UUIDs differ early. Cutting such an ID to a column's width
// keeps the part every ID shares and loses the part that tells them apart, so the tables that
// must be narrow drop the prefix the IDs of one resource share instead, print it once, and
// mark each shortened ID with a leading idPrefixMark. An ID is never cut anywhere else.

// idPrefixMark stands for the dropped prefix: "~3" is the prefix followed by "3". It differs
// from the ellipsis that marks a cell cut short to fit (inspect_table.go), so that a reader
// tells a whole ID without its prefix from a cut one.
const idPrefixMark = "~"

// minIDPrefix is the shortest shared prefix worth dropping: "GPU-" alone is not.
const minIDPrefix = 8

// commonIDPrefix returns the prefix to drop from ids: their longest common prefix (short of the
// whole of any ID), when it is at least minIDPrefix bytes long and there are two or more distinct
// IDs; "" otherwise. IDs that would print quoted (see display) are never shortened.
func commonIDPrefix(ids []string) string {
	distinct := map[string]bool{}
	for _, id := range ids {
		if display(id) != id {
			return ""
		}
		distinct[id] = true
	}
	if len(distinct) < 2 {
		return ""
	}
	sorted := make([]string, 0, len(distinct))
	for id := range distinct {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	// The common prefix of a sorted list is that of its first and last elements.
	first, last := sorted[0], sorted[len(sorted)-1]
	n := 0
	for n < len(first) && n < len(last) && first[n] == last[n] {
		n++
	}
	if n == len(first) {
		n-- // first is a prefix of the others: leave it its last byte
	}
	for n > 0 && !utf8.RuneStart(first[n]) {
		n-- // never split a rune
	}
	if n < minIDPrefix {
		return ""
	}
	return first[:n]
}

// idShortener shortens device IDs by their resource's common prefix.
type idShortener map[string]string // resource name → prefix

// newIDShortener finds the prefix of each resource's IDs.
func newIDShortener(idsByResource map[string][]string) idShortener {
	s := idShortener{}
	for res, ids := range idsByResource {
		if p := commonIDPrefix(ids); p != "" {
			s[res] = p
		}
	}
	return s
}

// id returns id for display, without its resource's prefix.
func (s idShortener) id(resource, id string) string {
	if p := s[resource]; p != "" && strings.HasPrefix(id, p) {
		return idPrefixMark + id[len(p):]
	}
	return display(id)
}

// ids applies id to every element.
func (s idShortener) ids(resource string, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = s.id(resource, id)
	}
	return out
}

// text shortens every occurrence of resource's prefix in free text, such as an environment
// variable that lists the devices.
func (s idShortener) text(resource, text string) string {
	if p := s[resource]; p != "" {
		return strings.ReplaceAll(text, p, idPrefixMark)
	}
	return text
}

// legendTitle heads the list of dropped prefixes.
const legendTitle = idPrefixMark + " in a device ID stands for its resource's shared prefix:"

// printLegend lists the dropped prefixes under legendTitle, a resource per line, sorted; a
// line that would be wider than cols puts the prefix on a line of its own. Nothing is printed
// when no prefix was dropped.
func (s idShortener) printLegend(w io.Writer, cols int) {
	if len(s) == 0 {
		return
	}
	fmt.Fprintln(w, legendTitle)
	for _, res := range sortedStrings(s) {
		line := "  " + display(res) + ": " + s[res]
		if width(line) > cols {
			line = "  " + display(res) + ":\n    " + s[res]
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
}
