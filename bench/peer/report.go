package main

// The replica report (rollcall.dev/policies annotation, contract v2), read whole or not at
// all, with the limits of rollcall's api/report.ts.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"unicode/utf16"

	"k8s.io/apimachinery/pkg/types"
)

const (
	reportAnnotation      = "rollcall.dev/policies"
	reportMaxBytes        = 192 * 1024
	reportMessageMaxChars = 1024
	reportUIDMaxChars     = 128
	maxSafeInteger        = 1<<53 - 1
)

type reportEntry struct {
	UID        string
	Generation int64
	State      string
	Message    *string
}

// reading is a pod's report as read: absent, invalid (with why) or valid.
type reading struct {
	absent  bool
	invalid string
	entries map[string]reportEntry
}

type rawEntry struct {
	UID        *string      `json:"uid"`
	Generation *json.Number `json:"generation"`
	State      *string      `json:"state"`
	Message    *string      `json:"message"`
	Serving    *json.Number `json:"serving"`
}

func readReport(annotation string, present bool) reading {
	if !present {
		return reading{absent: true}
	}
	if len(annotation) > reportMaxBytes {
		return reading{invalid: fmt.Sprintf("report is %d bytes, over the %d-byte limit", len(annotation), reportMaxBytes)}
	}
	data := []byte(annotation)
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		return reading{invalid: fmt.Sprintf("report is not valid JSON (%v)", err)}
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || trimmed[0] != '{' {
		return reading{invalid: "report must be a JSON object keyed by policy name"}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return reading{invalid: fmt.Sprintf("report has wrong types: %v", err)}
	}
	entries := make(map[string]reportEntry, len(raw))
	for name, body := range raw {
		entry, err := readEntry(name, body)
		if err != nil {
			return reading{invalid: "report has wrong types: " + err.Error()}
		}
		entries[name] = entry
	}
	return reading{entries: entries}
}

func readEntry(name string, body json.RawMessage) (reportEntry, error) {
	if name == "" {
		return reportEntry{}, fmt.Errorf("an empty policy name")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var r rawEntry
	if err := dec.Decode(&r); err != nil {
		return reportEntry{}, fmt.Errorf("%s: %v", name, err)
	}
	if r.UID == nil || *r.UID == "" || utf16Len(*r.UID) > reportUIDMaxChars {
		return reportEntry{}, fmt.Errorf("%s.uid: a string of 1 to %d characters is required", name, reportUIDMaxChars)
	}
	generation, ok := positiveInt(r.Generation)
	if !ok {
		return reportEntry{}, fmt.Errorf("%s.generation: an integer of at least 1 is required", name)
	}
	if r.State == nil || (*r.State != "Loading" && *r.State != "Loaded" && *r.State != "Failed") {
		return reportEntry{}, fmt.Errorf("%s.state: one of Loading, Loaded, Failed is required", name)
	}
	if r.Message != nil && utf16Len(*r.Message) > reportMessageMaxChars {
		return reportEntry{}, fmt.Errorf("%s.message: at most %d characters", name, reportMessageMaxChars)
	}
	if r.Serving != nil {
		serving, ok := positiveInt(r.Serving)
		switch {
		case !ok:
			return reportEntry{}, fmt.Errorf("%s.serving: an integer of at least 1 is required", name)
		case *r.State != "Failed":
			return reportEntry{}, fmt.Errorf("%s.serving: only allowed when state is Failed", name)
		case serving >= generation:
			return reportEntry{}, fmt.Errorf("%s.serving: must be older than generation", name)
		}
	}
	return reportEntry{UID: *r.UID, Generation: generation, State: *r.State, Message: r.Message}, nil
}

func positiveInt(n *json.Number) (int64, bool) {
	if n == nil {
		return 0, false
	}
	v, err := n.Int64()
	if err != nil {
		// 4.0 is an integer to JSON Schema and to zod.
		f, ferr := n.Float64()
		if ferr != nil || f != float64(int64(f)) {
			return 0, false
		}
		v = int64(f)
	}
	return v, v >= 1 && v <= maxSafeInteger
}

func utf16Len(s string) int { return len(utf16.Encode([]rune(s))) }

// reportCache reads each pod's report once per pod version: a policy server's report holds
// every policy, and the policies of one server all read the same few reports.
type reportCache struct {
	mu    sync.Mutex
	byPod map[types.UID]cachedReading
}

type cachedReading struct {
	resourceVersion string
	reading         reading
}

func (c *reportCache) read(uid types.UID, resourceVersion string, annotations map[string]string) reading {
	c.mu.Lock()
	cached, ok := c.byPod[uid]
	c.mu.Unlock()
	if ok && cached.resourceVersion == resourceVersion {
		return cached.reading
	}
	annotation, present := annotations[reportAnnotation]
	r := readReport(annotation, present)
	c.mu.Lock()
	c.byPod[uid] = cachedReading{resourceVersion: resourceVersion, reading: r}
	c.mu.Unlock()
	return r
}

// forget drops a deleted pod's reading.
func (c *reportCache) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.byPod, uid)
	c.mu.Unlock()
}
