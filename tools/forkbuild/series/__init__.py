"""The series: series.toml's model and the combinations it allows, patches/ and how both are written."""
