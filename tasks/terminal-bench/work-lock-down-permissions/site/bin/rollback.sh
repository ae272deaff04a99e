#!/bin/sh
echo rollback
