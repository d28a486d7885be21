#!/usr/bin/env bash
# The Makefile's check of a variable the user gives (RECIPE, PYTHON), when make reads it: prints one line
# saying what is wrong and how to fix it (the Makefile stops with it, exit 2), nothing when the value is fine.
# The value arrives as one argument, never as shell text, and is never echoed back (it may hold anything).
#   RECIPE: a recipe name (letters, digits, . _ -) or a path to a .yaml/.yml file (spaces and quotes welcome)
#   PYTHON: a version (3.11) or an interpreter, by name or path (python3.11, /opt/py/bin/python3)
# Usage: make-vars.sh NAME VALUE [line-break] (the Makefile adds line-break where the value held one, as
# make's $(shell) drops line breaks).
set -euo pipefail
export LC_ALL=C

name=$1 value=$2 broken=${3:-}
name_re='^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'
case $name in
RECIPE)
  what="a recipe name or a path to a .yaml file"
  fix="give a name under recipes/, e.g. RECIPE=cpu-local, or a path to a recipe file, e.g. RECIPE=../team/team.yaml"
  ok() { [[ $value =~ $name_re ]] || [[ $value != -* && $value =~ \.ya?ml$ ]]; }
  ;;
PYTHON)
  what="a Python version or interpreter"
  fix="give a version, e.g. PYTHON=3.11, or an interpreter, e.g. PYTHON=python3.11 or PYTHON=/opt/py/bin/python3"
  ok() { [[ -z $value || $value =~ ^3\.[0-9]{1,2}$ || ($value != -* && ${value##*/} =~ ^python[0-9.]*$) ]]; }
  ;;
*)
  echo "make-vars.sh: unknown variable $name (RECIPE or PYTHON)"
  exit 2
  ;;
esac
if [[ -n $broken || $value == *[[:cntrl:]]* ]]; then
  echo "$name: holds a control character (a line break, a tab, ...) ($fix)"
elif ! ok; then
  echo "$name: is not $what ($fix)"
fi
