package main

import (
	"path/filepath"

	"github.com/sandstorm-go/sandstorm/internal/svgchart"
)

// chartFiles writes charts as SVG files in one folder and keeps the
// paths it wrote, in order.
type chartFiles struct {
	dir     string
	written []string
}

// write writes c to the file name in the folder.
func (cf *chartFiles) write(name string, c *svgchart.Chart) error {
	p := filepath.Join(cf.dir, name)
	if err := c.WriteFile(p); err != nil {
		return err
	}
	cf.written = append(cf.written, p)
	return nil
}
