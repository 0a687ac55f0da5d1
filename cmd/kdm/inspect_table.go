package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"
)

const (
	// defaultInspectWidth is the terminal width the table fits into unless --width or --wide says
	// otherwise.
	defaultInspectWidth = 100
	// minInspectWidth is the narrowest table the fitter can still lay out readably.
	minInspectWidth = 60
	// ellipsis marks a cell cut short to fit; --wide prints it in full.
	ellipsis = "…"
)

// display returns s ready for a terminal. A string of printable runes with nothing that could make a
// cell ambiguous is returned as it is; anything else (control bytes such as NUL, invalid UTF-8,
// spaces, commas, quotes, backslashes, or the empty string) is quoted the way fmt's %q does, so the
// device ID "\x00" prints as "\x00" rather than as a raw NUL byte.
func display(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) || unicode.IsSpace(r) || strings.ContainsRune(`,"\`, r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// displayText is display for free text such as an environment variable's value, where spaces and
// commas are ordinary: only a string holding a non-printable rune or invalid UTF-8 is quoted.
func displayText(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// displayAll applies display to every element.
func displayAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = display(s)
	}
	return out
}

// width is the number of terminal columns s takes; after display every rune is printable, and
// we count one column per rune.
func width(s string) int { return utf8.RuneCountInString(s) }

// abbreviate cuts s to at most w columns, marking the cut with an ellipsis.
func abbreviate(s string, w int) string {
	if width(s) <= w {
		return s
	}
	if w <= 1 {
		return ellipsis
	}
	runes := []rune(s)
	return string(runes[:w-1]) + ellipsis
}

// formatNUMA lists the devices of one entry by NUMA node, node first so that an abbreviated cell
// still says where its devices sit: "numa 0: gpu-0,gpu-1; numa 1: gpu-2" or "no topology: nic-0".
// The IDs are shortened by ids (an empty idShortener prints them in full).
func formatNUMA(e inspectedEntry, ids idShortener) string {
	var parts []string
	for _, n := range sortedStrings(e.DeviceIDs) {
		label := "numa " + n
		if n == "-1" {
			label = "no topology"
		}
		parts = append(parts, label+": "+strings.Join(ids.ids(e.ResourceName, e.DeviceIDs[n]), ","))
	}
	return strings.Join(parts, "; ")
}

// summarize is a one-line account of an entry's allocation response: environment variables in
// full (device IDs in their values shortened by ids), the other fields counted.
func summarize(e inspectedEntry, ids idShortener) string {
	if e.resp == nil {
		return "undecodable: " + displayText(e.AllocRespErr)
	}
	r := e.resp
	var parts []string
	for _, k := range sortedStrings(r.Envs) {
		parts = append(parts, displayText(k)+"="+displayText(ids.text(e.ResourceName, r.Envs[k])))
	}
	if n := len(r.Devices); n > 0 {
		parts = append(parts, fmt.Sprintf("%d device specs", n))
	}
	if n := len(r.Mounts); n > 0 {
		parts = append(parts, fmt.Sprintf("%d mounts", n))
	}
	if n := len(r.Annotations); n > 0 {
		parts = append(parts, fmt.Sprintf("%d annotations", n))
	}
	for _, c := range r.CdiDevices {
		parts = append(parts, "cdi "+displayText(c.Name))
	}
	if len(parts) == 0 {
		return "(empty)"
	}
	return strings.Join(parts, "; ")
}

// idsByResource lists every device ID the checkpoint names, registered or assigned, by
// resource.
func (in *inspected) idsByResource() map[string][]string {
	out := map[string][]string{}
	for res, ids := range in.RegisteredDevices {
		out[res] = append(out[res], ids...)
	}
	for _, e := range in.Entries {
		for _, ids := range e.DeviceIDs {
			out[e.ResourceName] = append(out[e.ResourceName], ids...)
		}
	}
	return out
}

func printHeader(w io.Writer, in *inspected) {
	fmt.Fprintf(w, "file:     %s\nlayout:   %s\nchecksum: %d\nentries:  %d\n\n", display(in.File), in.Layout, in.Checksum, len(in.Entries))
}

// printWide prints every field in full, one entry per line, however wide that makes the table.
func printWide(w io.Writer, in *inspected) {
	printHeader(w, in)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tPOD UID\tCONTAINER\tRESOURCE\tDEVICES BY NUMA NODE\tALLOCATE RESPONSE")
	full := idShortener{}
	for _, e := range in.Entries {
		pod := "-"
		if e.Pod != "" {
			pod = display(e.Pod)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", pod, display(e.PodUID), display(e.ContainerName), display(e.ResourceName),
			formatNUMA(e, full), summarize(e, full))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	printContested(w, in)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tHEALTHY\tDEVICES")
	for _, res := range sortedStrings(in.RegisteredDevices) {
		ids := in.RegisteredDevices[res]
		fmt.Fprintf(tw, "%s\t%d\t%s\n", display(res), len(ids), strings.Join(displayAll(ids), ","))
	}
	_ = tw.Flush()
}

// printFitted prints the checkpoint so that no line is longer than cols (file names and single
// device IDs longer than a whole line excepted). Entries are grouped under a "pod" line, naming
// the pod and its UID, so the 36-column UID is not repeated in every row. Device IDs in the rows
// drop the prefix their resource's IDs share (listed above the table; see idShortener), so what
// tells them apart stays; then the allocate response, the device list, and the container and
// resource names are abbreviated at their ends as needed; the registered device lists are
// wrapped, every ID in full.
func printFitted(w io.Writer, in *inspected, cols int) {
	printHeader(w, in)
	const indent = "  "
	ids := newIDShortener(in.idsByResource())
	if len(in.Entries) > 0 {
		ids.printLegend(w, cols)
	}
	header := []string{"CONTAINER", "RESOURCE", "DEVICES BY NUMA NODE", "ALLOCATE RESPONSE"}
	rows := make([][]string, len(in.Entries))
	for i, e := range in.Entries {
		rows[i] = []string{display(e.ContainerName), display(e.ResourceName), formatNUMA(e, ids), summarize(e, ids)}
	}
	// The widest column gives way first; on a tie the response, then the devices, then the names.
	widths := fitColumns(header, rows, cols-len(indent), []int{10, 12, 16, 16}, []int{3, 2, 0, 1})
	cut := false
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range cells {
			a := abbreviate(c, widths[i])
			cut = cut || a != c
			if i == len(cells)-1 {
				b.WriteString(a)
				break
			}
			b.WriteString(a + strings.Repeat(" ", widths[i]-width(a)+2))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	if len(rows) > 0 {
		line(header)
	}
	lastPod := ""
	for i, e := range in.Entries {
		if i == 0 || e.PodUID != lastPod {
			fmt.Fprintf(w, "pod %s\n", in.podLabel(e.PodUID))
			lastPod = e.PodUID
		}
		line(rows[i])
	}
	if len(rows) > 0 {
		fmt.Fprintln(w)
	}
	printContested(w, in)
	printRegisteredWrapped(w, in.RegisteredDevices, cols)
	if cut {
		fmt.Fprintf(w, "\n(cells ending in %s are abbreviated to fit %d columns; kdm inspect --wide prints them in full)\n", ellipsis, cols)
	}
}

// printContested lists the devices that entries of more than one pod name, one per line, with
// what kdm does about them; nothing when there are none.
func printContested(w io.Writer, in *inspected) {
	if len(in.Contested) == 0 {
		return
	}
	fmt.Fprintf(w, "CONTESTED: %d devices are named by more than one pod; kdm keeps each held for all of them\n", len(in.Contested))
	fmt.Fprintln(w, "and allocates it to no other pod until one is left (delete the pod that should not hold it)")
	for _, c := range in.Contested {
		pods := make([]string, len(c.PodUIDs))
		for i, uid := range c.PodUIDs {
			pods[i] = in.podLabel(uid)
		}
		fmt.Fprintf(w, "  %s %s: pods %s\n", display(c.ResourceName), display(c.DeviceID), strings.Join(pods, ", "))
	}
	fmt.Fprintln(w)
}

// fitColumns returns one width per column: each column's widest cell, then, while the row (with
// two spaces between columns) is wider than total, the widest column is narrowed, none below its
// minimum or its header; shrinkOrder breaks ties and lists the columns that may shrink.
func fitColumns(header []string, rows [][]string, total int, minimum, shrinkOrder []int) []int {
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = width(h)
	}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], width(c))
		}
	}
	sum := 2 * (len(widths) - 1)
	for _, v := range widths {
		sum += v
	}
	floor := make([]int, len(widths))
	for i := range widths {
		floor[i] = max(minimum[i], width(header[i]))
	}
	// Take one column at a time from the widest column that is still above its floor; on a tie
	// the column earlier in shrinkOrder gives first.
	for sum > total {
		pick := -1
		for _, i := range shrinkOrder {
			if widths[i] > floor[i] && (pick < 0 || widths[i] > widths[pick]) {
				pick = i
			}
		}
		if pick < 0 {
			break
		}
		widths[pick]--
		sum--
	}
	return widths
}

// printRegisteredWrapped prints the healthy devices per resource with each device list wrapped
// at cols, continuation lines aligned under the list; a list never loses an ID.
func printRegisteredWrapped(w io.Writer, reg map[string][]string, cols int) {
	names := sortedStrings(reg)
	// A resource name longer than a third of the line does not widen the column; it gets a line
	// of its own with its list below.
	nameW := width("RESOURCE")
	for _, res := range names {
		if n := width(display(res)); n <= cols/3 {
			nameW = max(nameW, n)
		}
	}
	const countW = len("HEALTHY")
	listCol := nameW + 2 + countW + 2
	fmt.Fprintf(w, "%-*s  %-*s  %s\n", nameW, "RESOURCE", countW, "HEALTHY", "DEVICES")
	for _, res := range names {
		ids := displayAll(reg[res])
		name := display(res)
		prefix := fmt.Sprintf("%-*s  %-*d  ", nameW, name, countW, len(ids))
		if width(name) > nameW {
			fmt.Fprintln(w, name)
			prefix = fmt.Sprintf("%-*s  %-*d  ", nameW, "", countW, len(ids))
		}
		cur := prefix
		empty := true
		for i, id := range ids {
			piece := id
			if i < len(ids)-1 {
				piece += ","
			}
			if !empty && width(cur)+width(piece) > cols {
				fmt.Fprintln(w, cur)
				cur = strings.Repeat(" ", listCol)
				empty = true
			}
			cur += piece
			empty = false
		}
		fmt.Fprintln(w, strings.TrimRight(cur, " "))
	}
}
