//! `axp-lint`: tool-description quality and safety rules. Being built under issue 6.
