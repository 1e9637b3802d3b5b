package api

import "time"

// Template statuses.
const (
	TemplateBuilding = "building"
	TemplateReady    = "ready"
	TemplateFailed   = "failed"
)

// Template is an image sandboxes start from, as GET /v1/templates shows it.
type Template struct {
	Name string `json:"name"`
	// Kind is managed (shipped with the server: the managed image and the
	// images of its images dir) or image (imported).
	Kind   string `json:"kind" schema:"enum=managed,image"`
	Status string `json:"status" schema:"enum=building,ready,failed"`
	// Progress is the build's last step while building.
	Progress string `json:"progress,omitempty"`
	// Reason says why a build failed.
	Reason string `json:"reason,omitempty"`
	// Qualified: the last self-test (bash, python3, node, git, curl in a
	// real sandbox of the template) found every tool working.
	Qualified bool      `json:"qualified"`
	SelfTest  *SelfTest `json:"self_test,omitempty"`
}

// SelfTest is what a template's self-test found.
type SelfTest struct {
	Time    time.Time        `json:"time"`
	Results []SelfTestResult `json:"results"`
	// Failures names the tools that did not work.
	Failures []string `json:"failures"`
}

// SelfTestResult is one tool's check.
type SelfTestResult struct {
	Tool    string `json:"tool"`
	OK      bool   `json:"ok"`
	Version string `json:"version"`
}
