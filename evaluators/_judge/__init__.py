"""evaluators/_judge"""
