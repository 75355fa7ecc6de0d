package haboob

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed site
var bundled embed.FS

// BundledSite returns the small site embedded in the binary (a few pages,
// a style sheet and an image), served when no document root is given.
func BundledSite() fs.FS {
	sub, err := fs.Sub(bundled, "site")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	return sub
}

// ExtractSite writes the files of site under dir (which must exist), so
// that they are served from real files through the asynchronous file layer
// like any document root.
func ExtractSite(site fs.FS, dir string) error {
	return fs.WalkDir(site, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := fs.ReadFile(site, name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return fmt.Errorf("haboob: extract %s: %w", name, err)
		}
		return nil
	})
}
