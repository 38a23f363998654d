from cdc import docgen


def test_configuration_reference_is_current():
    assert docgen.TARGET.read_text() == docgen.render(), "run: python -m cdc.docgen"
