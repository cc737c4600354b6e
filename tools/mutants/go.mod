module github.com/txinbox/txinbox/tools/mutants

go 1.26.0
