package archive

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteDir writes the folder dir as a tar.gz to w: regular files (with
// their permission bits), directories (empty ones too) and symlinks,
// named relative to dir, owners left out. Paths ex excludes are left out,
// ex reading the folder's .coveignore files (the top one and those below)
// as the walk enters each folder; a nil ex leaves out nothing. Other file
// types (sockets, devices, FIFOs) are skipped.
//
// It follows names, as the user's own folder may; a tree written by
// someone else is packed with WriteTree.
func WriteDir(w io.Writer, dir string, ex *Excluder) error {
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	buf := make([]byte, 256<<10)
	ex = ex.withFolder()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return ex.enter(p, "")
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ex.Excluded(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if err := ex.enter(p, rel); err != nil {
				return err
			}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.CopyBuffer(tw, io.LimitReader(f, hdr.Size), buf)
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("%s changed size while it was read", p)
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
