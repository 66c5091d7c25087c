//! Operators: `map`, `filter`, `delay`, `reduce`, `window`, `join`.

pub mod delay;
pub mod filter;
pub mod join;
mod join_results;
pub mod key_by;
pub mod map;
pub mod reduce;
pub mod table_join;
pub mod window;

#[cfg(test)]
mod tests {
    use crate::component::BuildEnv;
    use crate::on_error::ErrorPolicy;
    use crate::test_util::{ctx, operator};
    use serde_json::json;

    #[test]
    fn only_processing_time_windows_need_the_clock_while_no_input_comes() {
        // A task whose operators all say no sleeps on its input; one that wrongly said no would
        // fire its windows late.
        for (info, settings, uses_time) in [
            (
                &super::window::INFO,
                json!({"size": "1s", "aggregate": "count"}),
                true,
            ),
            (
                &super::window::INFO,
                json!({"size": "1s", "time": "processing", "aggregate": "sum"}),
                true,
            ),
            (
                &super::window::INFO,
                json!({"size": "1s", "time": "event", "aggregate": "count"}),
                false,
            ),
            (&super::map::INFO, json!({"scale": 2}), false),
            (
                &super::map::INFO,
                json!({"set": {"d": "value * 2.0"}}),
                false,
            ),
            (&super::filter::INFO, json!({"where": "value > 1.0"}), false),
            (&super::filter::INFO, json!({"keep": 0.5}), false),
            (&super::reduce::INFO, json!({"aggregate": "sum"}), false),
            (
                &super::reduce::INFO,
                json!({"aggregates": {"n": "count"}}),
                false,
            ),
            (&super::delay::INFO, json!({"per_record": "1ms"}), false),
            (&super::join::INFO, json!({"between": ["-1s", "0s"]}), false),
        ] {
            let op = operator(info, settings.clone());
            assert_eq!(op.uses_time(), uses_time, "{} {settings}", info.type_name);
        }
        let key_by =
            super::key_by::key_by("key", ErrorPolicy::default(), &BuildEnv::default()).unwrap();
        assert!(!key_by(&ctx(0, 1, 0)).unwrap().uses_time());
    }
}
