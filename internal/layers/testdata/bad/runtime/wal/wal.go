package wal
