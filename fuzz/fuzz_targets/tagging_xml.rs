#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gateway::fuzzing::tagging_xml(data));
