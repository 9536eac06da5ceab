package tui

import (
	"fmt"
	"os"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/tui/forms"
)

// launchView is the form for a new job, or a spec file to submit as is. Fields are checked here
// first (empty name, bad counts); what passes goes to the scheduler, whose refusal (a spec error
// naming the key and line) is shown inline under the form, as the API returns it.
type launchView struct {
	c *shared
	size
	f *form
}

type fileLoadedMsg struct {
	path string
	data []byte
	err  error
}

// backMsg asks the app to go back (from a view that has the keyboard).
type backMsg struct{}

func newLaunchView(c *shared) *launchView {
	v := &launchView{c: c}
	v.reset()
	return v
}

func (v *launchView) reset() {
	f := newForm("launch a job")
	f.add(forms.FieldName, "name", "", "a-z, 0-9 and -, unique among live jobs")
	f.add(forms.FieldModel, "model", "mlp", strings.Join(forms.Models, " | "))
	f.add(forms.FieldData, "data", "mnist", strings.Join(forms.Datasets, " | "))
	f.add(forms.FieldServers, "servers", "2", "parameter servers")
	f.add(forms.FieldWorkers, "workers", "4", "workers")
	f.add(forms.FieldBatch, "global batch", "256", "samples per iteration, split across workers")
	f.add(forms.FieldSync, "sync", "bsp", strings.Join(forms.SyncModels, " | "))
	f.add(forms.FieldStaleness, "staleness", "", "s, for ssp, pssp and dsps")
	f.add(forms.FieldPolicies, "policies", "antdt-nd=approve", "policy=mode pairs; modes: "+strings.Join(forms.Modes, " | "))
	f.add(forms.FieldFile, "or spec file", "", "a job spec YAML file: when set, the fields above are ignored")
	v.f = f
}

func (v *launchView) Title() string             { return "launch" }
func (v *launchView) ShortHelp() []key.Binding  { return v.c.keys.Form.ShortHelp() }
func (v *launchView) FullHelp() [][]key.Binding { return v.c.keys.Form.FullHelp() }
func (v *launchView) Capturing() bool           { return !v.c.readOnly }
func (v *launchView) click(x, y int)            {}

// Init does nothing: the view draws from the shared context's data.
func (v *launchView) Init() tea.Cmd { return nil }

// Update takes the keys the root model did not, and clicks (coordinates in the view's area).
func (v *launchView) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	return v, route(msg, v.key, v.click)
}

// View draws the view in the area SetSize gave it.
func (v *launchView) View() string { return v.render(v.w, v.h) }

func (v *launchView) key(msg tea.KeyMsg) tea.Cmd {
	if v.c.readOnly {
		return nil
	}
	_, ev := v.f.update(msg, v.c.keys.Form)
	switch ev {
	case formCancel:
		return func() tea.Msg { return backMsg{} }
	case formSubmit:
		return v.submit()
	}
	return nil
}

func (v *launchView) submit() tea.Cmd {
	v.f.err = ""
	vals := v.f.values()
	if path := strings.TrimSpace(vals[forms.FieldFile]); path != "" {
		v.f.setErrors(nil)
		v.f.busy = true
		return func() tea.Msg {
			data, err := os.ReadFile(path)
			return fileLoadedMsg{path: path, data: data, err: err}
		}
	}
	l, errs := forms.ParseLaunch(vals)
	v.f.setErrors(errs)
	if len(errs) > 0 {
		return nil
	}
	return v.send(l.YAML(), l.Name)
}

func (v *launchView) send(spec, name string) tea.Cmd {
	v.f.busy = true
	what := "submit job"
	if name != "" {
		what += " " + name
	}
	return v.c.send(what, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: spec}}}, v.f,
		func(res *consolepb.CommandResult) tea.Cmd {
			job := res.GetJob()
			if job == "" {
				job = name
			}
			v.reset()
			if job == "" {
				return func() tea.Msg { return navigateMsg{to: viewJobs} }
			}
			return func() tea.Msg { return navigateMsg{to: viewJob, job: job} }
		})
}

func (v *launchView) fileLoaded(msg fileLoadedMsg) tea.Cmd {
	v.f.busy = false
	if msg.err != nil {
		v.f.setErrors(map[string]string{forms.FieldFile: fmt.Sprintf("cannot read %s: %v", msg.path, msg.err)})
		return nil
	}
	if strings.TrimSpace(string(msg.data)) == "" {
		v.f.setErrors(map[string]string{forms.FieldFile: msg.path + " is empty"})
		return nil
	}
	return v.send(string(msg.data), "")
}

func (v *launchView) render(w, h int) string {
	st := &v.c.st
	if v.c.readOnly {
		return v.c.box("launch a job", "\n  "+st.warn.Render("read-only: launching jobs is disabled (--readonly or a viewer token)"), w, h, true)
	}
	fw := w
	preview := ""
	if w >= 110 {
		fw = w * 3 / 5
		spec := "fix the fields on the left to see the spec"
		if path := strings.TrimSpace(v.f.values()[forms.FieldFile]); path != "" {
			spec = "the file " + path + " is sent as it is"
		} else if l, errs := forms.ParseLaunch(v.f.values()); len(errs) == 0 {
			spec = l.YAML()
		}
		preview = v.c.box("spec preview", spec, w-fw, h, false)
	}
	body := v.f.view(v.c, fw-4)
	hint := st.muted.Render(fmt.Sprintf("%s/%s move between fields · %s submits · %s cancels",
		v.c.keys.Form.Next.Help().Key, v.c.keys.Form.Prev.Help().Key, v.c.keys.Form.Submit.Help().Key, v.c.keys.Form.Cancel.Help().Key))
	box := v.c.box("launch a job", body+"\n"+hint, fw, h, true)
	if preview != "" {
		return hjoin(box, preview)
	}
	return box
}
